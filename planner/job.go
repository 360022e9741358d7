package planner

import (
	"fmt"
	"slices"
	"strings"

	"github.com/redlite/batch/engine/ml"
)

// LargestChunk is the largest prefill chunk the planner proposes. Candidates halve from it
// down to the calibration's MinChunk: 2048, 1024, 512.
const LargestChunk = 2048

// MaxSlots bounds Job.Slots: more parallel sequences than any worker runs, and small enough
// that the byte arithmetic cannot overflow.
const MaxSlots = 256

// Job is what the planner needs to know about one job.
type Job struct {
	// PromptTokens counts the prompt as the model sees it, chat template included.
	PromptTokens int `json:"prompt_tokens"`
	// MaxTokens is the most tokens the job may generate.
	MaxTokens int `json:"max_tokens"`
	// Slots is the number of parallel sequences the worker runs, each sized for this job;
	// zero means 1.
	Slots  int    `json:"slots,omitempty"`
	Policy Policy `json:"policy"`
}

// Dimension is one choice the preference orders.
type Dimension string

const (
	DimKV    Dimension = "kv"    // f32 before f16
	DimMTP   Dimension = "mtp"   // on before off
	DimChunk Dimension = "chunk" // larger before smaller
)

// DefaultPreference is the order in which plans that fit are compared when Policy.Preference
// is empty: KV precision first (f32 keeps attention exact; f16 is how a long job still fits),
// then MTP (it speeds every decode step), then the chunk (it only speeds prefill). Full
// expert residency always comes before a bounded cache, which is the last resort.
var DefaultPreference = []Dimension{DimKV, DimMTP, DimChunk}

// ExpertCachePolicy says when the planner may hold routed experts in a bounded cache.
type ExpertCachePolicy string

const (
	// CacheAuto (the default, also "") allows a bounded cache only when the worker cannot
	// hold the model's experts at all, even for a one-chunk job. A job that is merely too
	// long for a worker that holds the model does not fit here: a bigger worker runs it at
	// full speed, while a cache reads experts from the GGUF on every miss.
	CacheAuto ExpertCachePolicy = "auto"
	// CacheNever keeps every expert resident or refuses the job.
	CacheNever ExpertCachePolicy = "never"
	// CacheAllow uses a bounded cache as the last resort for any job.
	CacheAllow ExpertCachePolicy = "allow"
)

// KVPrecisions are the KV cache precisions the planner chooses from, best first.
var KVPrecisions = ml.KVTypes

// KVs are the precisions the policy lets the planner choose from: the forced one, or all.
func (p Policy) KVs() []ml.DType {
	if p.KV != nil {
		return []ml.DType{*p.KV}
	}
	return KVPrecisions
}

// kvChoices are the precisions of pol.KVs() that the calibration's backend holds and the
// model's heads can be stored in, best first; when none is, pol.KVs() itself, so that
// pricing it says why.
func kvChoices(pol Policy, p Profile, c Calibration) []ml.DType {
	var out []ml.DType
	for _, kv := range pol.KVs() {
		if slices.Contains(c.KVs(), kv) && p.KVPerPosition(kv) > 0 {
			out = append(out, kv)
		}
	}
	if len(out) == 0 {
		return pol.KVs()
	}
	return out
}

// ForceKV is a Policy.KV that forces precision d.
func ForceKV(d ml.DType) *ml.DType { return &d }

// Policy holds the knobs an operator or a job may set. The zero value is the default.
type Policy struct {
	// KV forces the KV precision; nil chooses.
	KV *ml.DType `json:"kv,omitempty"`
	// MaxChunk caps the prefill chunk; 0 means LargestChunk.
	MaxChunk int `json:"max_chunk,omitempty"`
	// DisableMTP keeps MTP off even where it would pay.
	DisableMTP bool `json:"disable_mtp,omitempty"`
	// ExpertCache says when a bounded expert cache may be used; "" means CacheAuto.
	ExpertCache ExpertCachePolicy `json:"expert_cache,omitempty"`
	// Preference orders the dimensions; empty means DefaultPreference. It must name each of
	// kv, mtp and chunk once.
	Preference []Dimension `json:"preference,omitempty"`
	// PrefixCacheMiB is a batching worker's prefix cache beside its KV pool
	// (Config.PrefixCacheBytes): PlanPool plans the pool around it. Per-job plans ignore it.
	PrefixCacheMiB int64 `json:"prefix_cache_mib,omitempty"`
}

// ParsePreference reads a comma-separated order such as "kv,mtp,chunk".
func ParsePreference(s string) ([]Dimension, error) {
	var dims []Dimension
	for _, f := range strings.Split(s, ",") {
		dims = append(dims, Dimension(strings.TrimSpace(f)))
	}
	return dims, validatePreference(dims)
}

func validatePreference(dims []Dimension) error {
	if len(dims) == 0 {
		return nil
	}
	seen := map[Dimension]bool{}
	for _, d := range dims {
		switch d {
		case DimKV, DimMTP, DimChunk:
		default:
			return fmt.Errorf("%w: preference: unknown dimension %q (want kv, mtp, chunk)", ErrBadJob, d)
		}
		if seen[d] {
			return fmt.Errorf("%w: preference names %q twice", ErrBadJob, d)
		}
		seen[d] = true
	}
	if len(dims) != len(DefaultPreference) {
		return fmt.Errorf("%w: preference %v must name each of kv, mtp and chunk once", ErrBadJob, dims)
	}
	return nil
}

// slots returns the number of slots, defaulting to 1.
func (j Job) slots() int { return max(j.Slots, 1) }

// Validate reports what is wrong with the job itself, before any model is considered.
func (j Job) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadJob, fmt.Sprintf(format, args...))
	}
	switch {
	case j.PromptTokens < 1:
		return bad("prompt_tokens must be ≥ 1 (it includes the chat template), got %d", j.PromptTokens)
	case j.MaxTokens < 1:
		return bad("max_tokens must be ≥ 1, got %d", j.MaxTokens)
	case j.Slots < 0 || j.Slots > MaxSlots:
		return bad("slots must be within [0, %d] (0 means 1), got %d", MaxSlots, j.Slots)
	case j.Policy.MaxChunk < 0:
		return bad("policy max_chunk must be ≥ 0 (0 means %d), got %d", LargestChunk, j.Policy.MaxChunk)
	}
	if kv := j.Policy.KV; kv != nil && !slices.Contains(KVPrecisions, *kv) {
		return bad("policy kv %v: want f32, f16, q8_0 or none", *kv)
	}
	switch j.Policy.ExpertCache {
	case "", CacheAuto, CacheNever, CacheAllow:
	default:
		return bad("policy expert_cache %q: want auto, never or allow", j.Policy.ExpertCache)
	}
	return validatePreference(j.Policy.Preference)
}
