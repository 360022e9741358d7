package planner

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/redlite/batch/engine/ml"
)

// Plan is the planner's answer for one job: the chosen configuration, every term of its
// memory need, the budget it was checked against and the alternatives that were priced.
type Plan struct {
	Config
	PromptTokens int   `json:"prompt_tokens"`
	MaxTokens    int   `json:"max_tokens"`
	NeedMiB      int64 `json:"need_mib"`
	// LimitMiB is the usable limit: GPULimitMiB − MarginMiB.
	LimitMiB          int64         `json:"limit_mib"`
	GPULimitMiB       int64         `json:"gpu_limit_mib"`
	MarginMiB         int64         `json:"margin_mib"`
	BudgetSource      BudgetSource  `json:"budget_source"`
	HeadroomMiB       int64         `json:"headroom_mib"`
	Calibration       string        `json:"calibration"`
	CalibrationStatus string        `json:"calibration_status"`
	Preference        []Dimension   `json:"preference"`
	Breakdown         Breakdown     `json:"breakdown"`
	Alternatives      []Alternative `json:"alternatives"`
}

// Alternative is one priced configuration.
type Alternative struct {
	Config
	NeedMiB int64 `json:"need_mib"`
	Fits    bool  `json:"fits"`
	// Excluded says why a configuration was not eligible although it was priced (MTP beyond
	// the calibration's MTP limit, a chunk larger than the prompt needs); empty when eligible.
	Excluded string `json:"excluded,omitempty"`
	Chosen   bool   `json:"chosen,omitempty"`
}

// Choose picks the plan for a job. Among the eligible configurations that fit it takes, with
// every expert resident, the first in the order of the policy's preference (by default f32
// before f16, MTP before none, larger chunks before smaller). Only when no resident plan fits
// and the policy allows it does it fall back to a bounded expert cache, taking the
// configuration that leaves the largest cache (each miss reads an expert from the GGUF, which
// costs more than anything the other choices buy) of at least Profile.MinCacheBytes. When
// nothing fits it returns a *DoesNotFitError. It does no I/O.
func Choose(job Job, p Profile, c Calibration, b Budget) (Plan, error) {
	if err := job.Validate(); err != nil {
		return Plan{}, err
	}
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	if err := c.Validate(); err != nil {
		return Plan{}, err
	}
	if err := b.Validate(); err != nil {
		return Plan{}, err
	}
	if job.PromptTokens > p.ContextLength || job.MaxTokens > p.ContextLength-job.PromptTokens {
		return Plan{}, fmt.Errorf("%w: prompt_tokens %s + max_tokens %s exceeds the trained context of %s (%s)",
			ErrBadJob, commas(int64(job.PromptTokens)), commas(int64(job.MaxTokens)), commas(int64(p.ContextLength)), p.Name)
	}
	chunks, err := chunkLadder(c.MinChunk, job.Policy.MaxChunk)
	if err != nil {
		return Plan{}, err
	}
	pref := job.Policy.Preference
	if len(pref) == 0 {
		pref = DefaultPreference
	}
	s := search{job: job, p: p, c: c, b: b, pref: pref, chunks: chunks,
		context: job.PromptTokens + job.MaxTokens, usable: b.UsableMiB()}

	resident, err := s.resident()
	if err != nil {
		return Plan{}, err
	}
	alts := resident
	chosen := firstFit(alts)
	if chosen < 0 && s.cacheAllowed() {
		cached, err := s.cached()
		if err != nil {
			return Plan{}, err
		}
		alts = append(alts, cached...)
		if i := firstFit(cached); i >= 0 {
			chosen = len(resident) + i
		}
	}
	if chosen < 0 {
		return Plan{}, s.doesNotFit(alts)
	}
	alts[chosen].Chosen = true
	cfg := alts[chosen].Config
	br, err := Estimate(cfg, p, c)
	if err != nil {
		return Plan{}, err
	}
	return Plan{
		Config:            cfg,
		PromptTokens:      job.PromptTokens,
		MaxTokens:         job.MaxTokens,
		NeedMiB:           br.NeedMiB(),
		LimitMiB:          s.usable,
		GPULimitMiB:       b.LimitMiB,
		MarginMiB:         b.MarginMiB,
		BudgetSource:      b.Source,
		HeadroomMiB:       s.usable - br.NeedMiB(),
		Calibration:       c.Name,
		CalibrationStatus: c.Status,
		Preference:        slices.Clone(pref),
		Breakdown:         br,
		Alternatives:      alts,
	}, nil
}

// search holds one Choose call's inputs.
type search struct {
	job     Job
	p       Profile
	c       Calibration
	b       Budget
	pref    []Dimension
	chunks  []int
	context int
	usable  int64 // MiB
}

func (s *search) kvs() []ml.DType { return kvChoices(s.job.Policy, s.p, s.c) }

func (s *search) mtps() []bool {
	if s.p.HasMTP() && !s.job.Policy.DisableMTP {
		return []bool{true, false}
	}
	return []bool{false}
}

// excluded says why a priced configuration is not eligible.
func (s *search) excluded(cfg Config) string {
	if cfg.MTP && s.c.MTPMaxContext > 0 && cfg.Context > s.c.MTPMaxContext {
		return fmt.Sprintf("context %s is beyond the MTP limit of %s", commas(int64(cfg.Context)), commas(int64(s.c.MTPMaxContext)))
	}
	for _, smaller := range s.chunks {
		if smaller < cfg.Chunk && smaller >= s.job.PromptTokens {
			return fmt.Sprintf("the %s-token prompt fits a %d-token chunk", commas(int64(s.job.PromptTokens)), smaller)
		}
	}
	return ""
}

func (s *search) configs(res Residency) []Config {
	var out []Config
	for _, kv := range s.kvs() {
		for _, mtp := range s.mtps() {
			for _, chunk := range s.chunks {
				out = append(out, Config{Context: s.context, Slots: s.job.slots(), KV: kv, Chunk: chunk, MTP: mtp, Residency: res})
			}
		}
	}
	return out
}

// resident prices every eligible-by-policy configuration with all experts resident, in the
// order of preference.
func (s *search) resident() ([]Alternative, error) {
	var alts []Alternative
	for _, cfg := range s.configs(ResidencyFull) {
		cfg.ExpertCacheBytes = s.p.ExpertCacheBytes
		br, err := Estimate(cfg, s.p, s.c)
		if err != nil {
			return nil, err
		}
		alts = append(alts, Alternative{Config: cfg, NeedMiB: br.NeedMiB(), Fits: br.NeedMiB() <= s.usable, Excluded: s.excluded(cfg)})
	}
	slices.SortStableFunc(alts, func(a, b Alternative) int { return s.compare(a.Config, b.Config) })
	return alts, nil
}

// cached prices the eligible configurations with the largest bounded cache each leaves room
// for, largest cache first.
func (s *search) cached() ([]Alternative, error) {
	minCache := s.p.MinCacheBytes()
	var alts []Alternative
	for _, cfg := range s.configs(ResidencyCache) {
		if s.excluded(cfg) != "" {
			continue
		}
		rest, err := Estimate(cfg, s.p, s.c) // ExpertCacheBytes is 0: everything else
		if err != nil {
			return nil, err
		}
		// The cache gets the room left, in whole MiB, or exactly the minimum when that is all
		// that fits; when even the minimum does not fit, it is priced at the minimum.
		room := s.usable*MiB - rest.TotalBytes
		fits := room >= minCache
		size := max(room/MiB*MiB, minCache)
		size = min(size, s.p.ExpertCacheBytes)
		cfg.ExpertCacheBytes = size
		br, err := Estimate(cfg, s.p, s.c)
		if err != nil {
			return nil, err
		}
		alts = append(alts, Alternative{Config: cfg, NeedMiB: br.NeedMiB(), Fits: fits && br.NeedMiB() <= s.usable})
	}
	slices.SortStableFunc(alts, func(a, b Alternative) int {
		if c := cmp.Compare(b.ExpertCacheBytes, a.ExpertCacheBytes); c != 0 {
			return c
		}
		return s.compare(a.Config, b.Config)
	})
	return alts, nil
}

// cacheAllowed says whether a bounded cache may be tried once no resident plan fits.
func (s *search) cacheAllowed() bool {
	if s.p.ExpertCacheBytes == 0 {
		return false
	}
	switch s.job.Policy.ExpertCache {
	case CacheNever:
		return false
	case CacheAllow:
		return true
	}
	// Auto: only a worker that cannot hold the experts even for a one-chunk job uses a cache.
	cfg := s.cheapest()
	cfg.Context = min(s.c.MinChunk, s.p.ContextLength)
	br, err := Estimate(cfg, s.p, s.c)
	return err == nil && br.NeedMiB() > s.usable
}

// cheapest is the resident configuration with the smallest need the policy allows.
func (s *search) cheapest() Config {
	kvs := s.kvs()
	return Config{Context: s.context, Slots: s.job.slots(), KV: kvs[len(kvs)-1], Chunk: s.chunks[len(s.chunks)-1],
		Residency: ResidencyFull, ExpertCacheBytes: s.p.ExpertCacheBytes}
}

func (s *search) doesNotFit(alts []Alternative) error {
	nearest := s.cheapest()
	br, err := Estimate(nearest, s.p, s.c)
	if err != nil {
		return err
	}
	largest := nearest
	largest.Context = s.longest(largest)
	if largest.Context == 0 && s.cacheAllowed() {
		largest.Residency, largest.ExpertCacheBytes = ResidencyCache, s.p.MinCacheBytes()
		largest.Context = s.longest(largest)
	}
	e := &DoesNotFitError{
		PromptTokens:     s.job.PromptTokens,
		MaxTokens:        s.job.MaxTokens,
		Slots:            s.job.slots(),
		NeedMiB:          br.NeedMiB(),
		Nearest:          nearest,
		LimitMiB:         s.usable,
		GPULimitMiB:      s.b.LimitMiB,
		MarginMiB:        s.b.MarginMiB,
		SmallestLimitMiB: br.NeedMiB() + s.b.MarginMiB,
		Largest:          largest,
		MaxTokensFit:     max(largest.Context-s.job.PromptTokens, 0),
		Alternatives:     alts,
	}
	return e
}

// longest finds the longest context that fits with cfg's other settings, 0 if none does.
// Need grows with context, so a binary search over [1, trained context] finds it.
func (s *search) longest(cfg Config) int {
	fits := func(n int) bool {
		cfg.Context = n
		br, err := Estimate(cfg, s.p, s.c)
		return err == nil && br.NeedMiB() <= s.usable
	}
	lo, hi := 0, s.p.ContextLength // fits(lo) or lo == 0; !fits(hi+1)
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// compare orders configurations by the preference: negative when a is preferred.
func (s *search) compare(a, b Config) int {
	for _, d := range s.pref {
		var c int
		switch d {
		case DimKV:
			c = cmp.Compare(kvRank(a.KV), kvRank(b.KV))
		case DimMTP:
			c = cmp.Compare(boolRank(a.MTP), boolRank(b.MTP))
		case DimChunk:
			c = cmp.Compare(b.Chunk, a.Chunk)
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

func kvRank(p ml.DType) int {
	if p == ml.F32 {
		return 0
	}
	return 1
}

func boolRank(on bool) int {
	if on {
		return 0
	}
	return 1
}

func firstFit(alts []Alternative) int {
	for i, a := range alts {
		if a.Fits && a.Excluded == "" {
			return i
		}
	}
	return -1
}

// chunkLadder lists the candidate chunks: LargestChunk halved down to minChunk (which is
// always included), capped by maxChunk (0 = no cap).
func chunkLadder(minChunk, maxChunk int) ([]int, error) {
	if maxChunk == 0 {
		maxChunk = LargestChunk
	}
	if maxChunk < minChunk {
		return nil, fmt.Errorf("%w: policy max_chunk %d is below the backend's smallest chunk %d", ErrBadJob, maxChunk, minChunk)
	}
	var out []int
	for c := LargestChunk; c > minChunk; c /= 2 {
		if c <= maxChunk {
			out = append(out, c)
		}
	}
	return append(out, minChunk), nil
}
