package planner

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/ml"
)

// redLiteLimit is recommendedMaxWorkingSetSize of the 24 GiB M4 Pro Red Lite measured on.
const redLiteLimit = 21741

func redLiteProfile(t testing.TB) Profile {
	t.Helper()
	f, err := os.Open("testdata/qwen3next-80b-a3b-iq2_xxs.profile.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := ReadProfile(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func budget(limit int64) Budget { return Budget{LimitMiB: limit, Source: SourceOverride} }

// TestDesignTable prices the six configurations of DESIGN.md's table and checks the need to
// the MiB and the outcome at Red Lite's limit.
func TestDesignTable(t *testing.T) {
	p, c := redLiteProfile(t), RedLiteMetal()
	for _, tc := range []struct {
		name string
		cfg  Config
		need int64
		fits bool
	}{
		{"F32MTP32KChunk512", Config{Context: 32768, KV: ml.F32, MTP: true, Chunk: 512}, 22302, false},
		{"F32NoMTP32KChunk2048", Config{Context: 32768, KV: ml.F32, MTP: false, Chunk: 2048}, 21087, true},
		{"F32MTP4KChunk2048", Config{Context: 4096, KV: ml.F32, MTP: true, Chunk: 2048}, 21530, true},
		{"F16MTP32KChunk512", Config{Context: 32768, KV: ml.F16, MTP: true, Chunk: 512}, 21534, true},
		{"F16MTP16KChunk2048", Config{Context: 16384, KV: ml.F16, MTP: true, Chunk: 2048}, 21722, true},
		{"F16MTP32KChunk2048", Config{Context: 32768, KV: ml.F16, MTP: true, Chunk: 2048}, 22106, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Slots, tc.cfg.Residency = 1, ResidencyFull
			br, err := Estimate(tc.cfg, p, c)
			if err != nil {
				t.Fatal(err)
			}
			if got := br.NeedMiB(); got != tc.need {
				t.Errorf("need = %d MiB, want %d (breakdown %+v)", got, tc.need, br)
			}
			if fits := br.NeedMiB() <= redLiteLimit; fits != tc.fits {
				t.Errorf("fits = %v at %d MiB, want %v", fits, redLiteLimit, tc.fits)
			}
		})
	}
}

func TestBreakdownTerms(t *testing.T) {
	p, c := redLiteProfile(t), RedLiteMetal()
	br, err := Estimate(Config{Context: 4000, Slots: 2, KV: ml.F32, Chunk: 1024, MTP: true, Residency: ResidencyFull}, p, c)
	if err != nil {
		t.Fatal(err)
	}
	want := Breakdown{
		ExpertCacheBytes:   17316 * MiB,
		DenseBytes:         1083 * MiB,
		BaseBytes:          580 * MiB,
		KVPositions:        4000*2 + 1536,
		StatePositions:     1536,
		KVBytesPerPosition: 48 << 10,
		KVBytes:            (4000*2 + 1536) * 48 << 10,
		ScratchTokens:      512,
		// 512 × 572/1536 MiB = 199,928,490.7 bytes, rounded to the byte and up to 16 KiB.
		ScratchBytes: 199933952,
		MTPBytes:     1787 * MiB,
	}
	want.TotalBytes = want.ExpertCacheBytes + want.DenseBytes + want.BaseBytes + want.KVBytes + want.ScratchBytes + want.MTPBytes
	if d := diff(want, br); d != "" {
		t.Errorf("breakdown (-want +got):\n%s", d)
	}
	if p.StatePositions(ml.F16) != 3072 {
		t.Errorf("state positions in f16 = %d, want 3072", p.StatePositions(ml.F16))
	}
}

// chosen is the part of a plan the table tests pin.
type chosen struct {
	Config
	NeedMiB     int64 `json:"need_mib"`
	HeadroomMiB int64 `json:"headroom_mib"`
}

func pick(p Plan) chosen { return chosen{p.Config, p.NeedMiB, p.HeadroomMiB} }

func full(p Profile, context int, kv ml.DType, chunk int, mtp bool) Config {
	return Config{Context: context, Slots: 1, KV: kv, Chunk: chunk, MTP: mtp, Residency: ResidencyFull, ExpertCacheBytes: p.ExpertCacheBytes}
}

// TestChooseRedLite checks the choices issue 4 asks for at Red Lite's limit, no margin.
func TestChooseRedLite(t *testing.T) {
	p, c, b := redLiteProfile(t), RedLiteMetal(), budget(redLiteLimit)
	for _, tc := range []struct {
		name string
		job  Job
		want Config
		need int64
	}{
		{"Short", Job{PromptTokens: 3000, MaxTokens: 1000}, full(p, 4000, ml.F32, 2048, true), 21526},
		{"Medium", Job{PromptTokens: 30000, MaxTokens: 2000}, full(p, 32000, ml.F32, 2048, false), 21051},
		{"Long", Job{PromptTokens: 60000, MaxTokens: 4000}, full(p, 64000, ml.F16, 2048, false), 21051},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Choose(tc.job, p, c, b)
			if err != nil {
				t.Fatal(err)
			}
			want := chosen{tc.want, tc.need, redLiteLimit - tc.need}
			if d := diff(want, pick(plan)); d != "" {
				t.Errorf("plan (-want +got):\n%s", d)
			}
			if plan.Breakdown.NeedMiB() != plan.NeedMiB {
				t.Errorf("breakdown says %d MiB, plan %d", plan.Breakdown.NeedMiB(), plan.NeedMiB)
			}
			var n int
			for _, a := range plan.Alternatives {
				if a.Chosen {
					n++
					if a.Config != plan.Config || a.NeedMiB != plan.NeedMiB || !a.Fits {
						t.Errorf("chosen alternative %+v does not match the plan", a)
					}
				}
			}
			if n != 1 {
				t.Errorf("%d alternatives marked chosen, want 1", n)
			}
			// 2 precisions × 2 MTP × 3 chunks, all priced.
			if len(plan.Alternatives) != 12 {
				t.Errorf("%d alternatives, want 12", len(plan.Alternatives))
			}
		})
	}

	t.Run("TooLong", func(t *testing.T) {
		_, err := Choose(Job{PromptTokens: 120000, MaxTokens: 4000}, p, c, b)
		var dnf *DoesNotFitError
		if !errors.As(err, &dnf) || !errors.Is(err, ErrDoesNotFit) {
			t.Fatalf("err = %v, want a *DoesNotFitError matching ErrDoesNotFit", err)
		}
		// f16 at 512-token chunks: 18,979 + 124,000 × 24 KiB = 21,885.25 MiB → 21,886.
		// The largest context: (21,741 − 18,979) MiB / 24 KiB = 117,845.3 positions.
		largest := full(p, 117845, ml.F16, 512, false)
		want := struct {
			Need, Limit, Smallest int64
			Nearest, Largest      Config
			MaxTokens             int
		}{21886, redLiteLimit, 21886, full(p, 124000, ml.F16, 512, false), largest, 0}
		got := struct {
			Need, Limit, Smallest int64
			Nearest, Largest      Config
			MaxTokens             int
		}{dnf.NeedMiB, dnf.LimitMiB, dnf.SmallestLimitMiB, dnf.Nearest, dnf.Largest, dnf.MaxTokensFit}
		if d := diff(want, got); d != "" {
			t.Errorf("does-not-fit (-want +got):\n%s", d)
		}
		msg := "needs 21,886 MiB (f16 KV, 512-token chunks) but the limit is 21,741 MiB; " +
			"this worker takes at most 117,845 tokens of prompt + output (f16 KV, 512-token chunks), " +
			"fewer than the 120,000-token prompt; fits on a worker with ≥ 21,886 MiB"
		if err.Error() != msg {
			t.Errorf("message:\n got %s\nwant %s", err, msg)
		}
		// The largest job really is the edge: one more position does not fit.
		for n, fits := range map[int]bool{117845: true, 117846: false} {
			br, err := Estimate(full(p, n, ml.F16, 512, false), p, c)
			if err != nil {
				t.Fatal(err)
			}
			if br.NeedMiB() <= redLiteLimit != fits {
				t.Errorf("context %d needs %d MiB: fits should be %v", n, br.NeedMiB(), fits)
			}
		}
	})

	t.Run("ShorterOutputFits", func(t *testing.T) {
		_, err := Choose(Job{PromptTokens: 110000, MaxTokens: 10000}, p, c, b)
		var dnf *DoesNotFitError
		if !errors.As(err, &dnf) {
			t.Fatalf("err = %v, want *DoesNotFitError", err)
		}
		if dnf.MaxTokensFit != 7845 {
			t.Errorf("max_tokens_fit = %d, want 7845", dnf.MaxTokensFit)
		}
		want := "needs 21,792 MiB (f16 KV, 512-token chunks) but the limit is 21,741 MiB; fits with max_tokens ≤ 7,845 or on a worker with ≥ 21,792 MiB"
		if err.Error() != want {
			t.Errorf("message:\n got %s\nwant %s", err, want)
		}
		// Taking the advice gives a plan.
		plan, err := Choose(Job{PromptTokens: 110000, MaxTokens: dnf.MaxTokensFit}, p, c, b)
		if err != nil {
			t.Fatalf("with max_tokens %d: %v", dnf.MaxTokensFit, err)
		}
		if plan.NeedMiB > redLiteLimit {
			t.Errorf("plan needs %d MiB over the limit", plan.NeedMiB)
		}
	})

	t.Run("SmallestLimitHoldsIt", func(t *testing.T) {
		plan, err := Choose(Job{PromptTokens: 120000, MaxTokens: 4000}, p, c, budget(21886))
		if err != nil {
			t.Fatal(err)
		}
		if d := diff(chosen{full(p, 124000, ml.F16, 512, false), 21886, 0}, pick(plan)); d != "" {
			t.Errorf("plan at 21,886 MiB (-want +got):\n%s", d)
		}
	})
}

func TestPolicy(t *testing.T) {
	p, c, b := redLiteProfile(t), RedLiteMetal(), budget(redLiteLimit)
	short := func(pol Policy) Job { return Job{PromptTokens: 3000, MaxTokens: 1000, Policy: pol} }
	for _, tc := range []struct {
		name string
		job  Job
		want Config
		need int64
	}{
		// 18,979 + 93.75 + 572 + 1,787 = 21,431.75.
		{"ForceF16", short(Policy{KV: ForceKV(ml.F16)}), full(p, 4000, ml.F16, 2048, true), 21432},
		// 18,979 + 187.5 + 190.67 + 1,787 = 21,144.17.
		{"CapChunk", short(Policy{MaxChunk: 1024}), full(p, 4000, ml.F32, 1024, true), 21145},
		{"CapChunkBetweenSteps", short(Policy{MaxChunk: 1500}), full(p, 4000, ml.F32, 1024, true), 21145},
		// 18,979 + 187.5 + 572 = 19,738.5.
		{"DisableMTP", short(Policy{DisableMTP: true}), full(p, 4000, ml.F32, 2048, false), 19739},
		// A short prompt never gets a larger chunk than it needs: 18,979 + 46.875 + 1,787.
		{"SmallPrompt", Job{PromptTokens: 400, MaxTokens: 600}, full(p, 1000, ml.F32, 512, true), 20813},
		// 18,979 + 93.75 + 190.67 + 1,787 = 21,050.42.
		{"PromptFitsMidChunk", Job{PromptTokens: 1000, MaxTokens: 1000}, full(p, 2000, ml.F32, 1024, true), 21051},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Choose(tc.job, p, c, b)
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(chosen{tc.want, tc.need, redLiteLimit - tc.need}, pick(plan)); d != "" {
				t.Errorf("plan (-want +got):\n%s", d)
			}
		})
	}

	t.Run("Preference", func(t *testing.T) {
		// Two slots of 4,000: 9,536 positions (the second slot's state is 1,536). With the
		// default order f32+MTP survives by dropping to 1024-token chunks; preferring chunks
		// first keeps 2048 and gives up MTP instead.
		job := Job{PromptTokens: 3000, MaxTokens: 1000, Slots: 2}
		plan, err := Choose(job, p, c, b)
		if err != nil {
			t.Fatal(err)
		}
		want := full(p, 4000, ml.F32, 1024, true)
		want.Slots = 2
		if d := diff(chosen{want, 21404, redLiteLimit - 21404}, pick(plan)); d != "" {
			t.Errorf("default preference (-want +got):\n%s", d)
		}
		job.Policy.Preference = []Dimension{DimChunk, DimKV, DimMTP}
		plan, err = Choose(job, p, c, b)
		if err != nil {
			t.Fatal(err)
		}
		want = full(p, 4000, ml.F32, 2048, false)
		want.Slots = 2
		// 18,979 + 9,536 × 48 KiB (447) + 572.
		if d := diff(chosen{want, 19998, redLiteLimit - 19998}, pick(plan)); d != "" {
			t.Errorf("chunk-first preference (-want +got):\n%s", d)
		}
		if plan.Breakdown.KVPositions != 9536 {
			t.Errorf("kv positions = %d, want 9536", plan.Breakdown.KVPositions)
		}
	})

	t.Run("ForcedF32DoesNotFit", func(t *testing.T) {
		_, err := Choose(Job{PromptTokens: 50000, MaxTokens: 14000, Policy: Policy{KV: ForceKV(ml.F32)}}, p, c, b)
		var dnf *DoesNotFitError
		if !errors.As(err, &dnf) {
			t.Fatalf("err = %v, want *DoesNotFitError", err)
		}
		// f32 at 512: 18,979 + 3,000 = 21,979; the worker takes (21,741 − 18,979) / 48 KiB
		// = 58,922 positions.
		if dnf.NeedMiB != 21979 || dnf.Nearest.KV != ml.F32 || dnf.Largest.Context != 58922 || dnf.MaxTokensFit != 8922 {
			t.Errorf("got need %d (%v), largest %d, max tokens %d; want 21979 (f32), 58922, 8922",
				dnf.NeedMiB, dnf.Nearest, dnf.Largest.Context, dnf.MaxTokensFit)
		}
	})

	t.Run("Margin", func(t *testing.T) {
		mb := Budget{LimitMiB: redLiteLimit, MarginMiB: 700, Source: SourceMetal}
		plan, err := Choose(Job{PromptTokens: 30000, MaxTokens: 2000}, p, c, mb)
		if err != nil {
			t.Fatal(err)
		}
		// 21,051 no longer fits under 21,041; 18,979 + 1,500 + 190.67 does.
		if d := diff(chosen{full(p, 32000, ml.F32, 1024, false), 20670, 21041 - 20670}, pick(plan)); d != "" {
			t.Errorf("plan (-want +got):\n%s", d)
		}
		if plan.LimitMiB != 21041 || plan.GPULimitMiB != redLiteLimit || plan.MarginMiB != 700 {
			t.Errorf("limits %d / %d / %d, want 21041 / 21741 / 700", plan.LimitMiB, plan.GPULimitMiB, plan.MarginMiB)
		}
		_, err = Choose(Job{PromptTokens: 120000, MaxTokens: 4000}, p, c, mb)
		var dnf *DoesNotFitError
		if !errors.As(err, &dnf) {
			t.Fatalf("err = %v, want *DoesNotFitError", err)
		}
		if dnf.SmallestLimitMiB != 21886+700 {
			t.Errorf("smallest limit %d, want %d", dnf.SmallestLimitMiB, 21886+700)
		}
		if !strings.Contains(err.Error(), "(21,741 MiB GPU limit − 700 MiB margin)") ||
			!strings.Contains(err.Error(), "a GPU limit ≥ 22,586 MiB") {
			t.Errorf("message does not explain the margin: %v", err)
		}
	})
}

func TestBoundedCache(t *testing.T) {
	p, c := redLiteProfile(t), RedLiteMetal()
	job := Job{PromptTokens: 3000, MaxTokens: 1000}

	t.Run("ModelTooBigFallsBack", func(t *testing.T) {
		plan, err := Choose(job, p, c, budget(16000))
		if err != nil {
			t.Fatal(err)
		}
		// Everything but the cache with f16, no MTP, 512-token chunks: 1,083 + 580 + 93.75;
		// the cache gets the rest of 16,000 MiB, rounded down: 14,243 MiB.
		want := Config{Context: 4000, Slots: 1, KV: ml.F16, Chunk: 512, Residency: ResidencyCache, ExpertCacheBytes: 14243 * MiB}
		if d := diff(chosen{want, 16000, 0}, pick(plan)); d != "" {
			t.Errorf("plan (-want +got):\n%s", d)
		}
	})

	t.Run("NeverMeansDoesNotFit", func(t *testing.T) {
		j := job
		j.Policy.ExpertCache = CacheNever
		_, err := Choose(j, p, c, budget(16000))
		var dnf *DoesNotFitError
		if !errors.As(err, &dnf) {
			t.Fatalf("err = %v, want *DoesNotFitError", err)
		}
		if dnf.Largest.Context != 0 || !strings.Contains(err.Error(), "cannot hold the model") {
			t.Errorf("largest %d, message %q: want 0 and 'cannot hold the model'", dnf.Largest.Context, err)
		}
	})

	t.Run("AutoKeepsLongJobsForBiggerWorkers", func(t *testing.T) {
		_, err := Choose(Job{PromptTokens: 120000, MaxTokens: 4000}, p, c, budget(redLiteLimit))
		if !errors.Is(err, ErrDoesNotFit) {
			t.Fatalf("err = %v, want ErrDoesNotFit", err)
		}
	})

	t.Run("AllowTakesLongJobs", func(t *testing.T) {
		j := Job{PromptTokens: 120000, MaxTokens: 4000, Policy: Policy{ExpertCache: CacheAllow}}
		plan, err := Choose(j, p, c, budget(redLiteLimit))
		if err != nil {
			t.Fatal(err)
		}
		// 1,083 + 580 + 2,906.25 = 4,569.25 MiB; cache 17,171 MiB.
		want := Config{Context: 124000, Slots: 1, KV: ml.F16, Chunk: 512, Residency: ResidencyCache, ExpertCacheBytes: 17171 * MiB}
		if d := diff(chosen{want, 21741, 0}, pick(plan)); d != "" {
			t.Errorf("plan (-want +got):\n%s", d)
		}
	})

	t.Run("BelowMinimumCache", func(t *testing.T) {
		// 1,083 + 580 + 93.75 leaves 243 MiB of 2,000: less than one layer (360.75 MiB).
		_, err := Choose(job, p, c, budget(2000))
		var dnf *DoesNotFitError
		if !errors.As(err, &dnf) {
			t.Fatalf("err = %v, want *DoesNotFitError", err)
		}
		var cached int
		for _, a := range dnf.Alternatives {
			if a.Residency == ResidencyCache {
				cached++
				if a.Fits || a.ExpertCacheBytes != p.MinCacheBytes() {
					t.Errorf("cache alternative %+v: want priced at the minimum cache and not fitting", a)
				}
			}
		}
		if cached == 0 {
			t.Error("no bounded-cache alternative was priced")
		}
		if p.MinCacheBytes() != 378273792 { // 17,316 MiB / 48 layers = 360.75 MiB
			t.Errorf("min cache %d bytes, want 378273792", p.MinCacheBytes())
		}
	})

	t.Run("MinimumIsLargestLayer", func(t *testing.T) {
		q := Profile{ExpertLayerCount: 2, ExpertLayers: []ExpertLayer{
			{Layer: 0, Experts: 4, Bytes: 4 * 5000, SlotBytes: 8192},
			{Layer: 1, Experts: 4, Bytes: 4 * 9000, SlotBytes: 12288},
		}}
		if got := q.MinCacheBytes(); got != 4*12288 {
			t.Errorf("min cache %d, want %d", got, 4*12288)
		}
	})
}

func TestBadInput(t *testing.T) {
	p, c, b := redLiteProfile(t), RedLiteMetal(), budget(redLiteLimit)
	ok := Job{PromptTokens: 3000, MaxTokens: 1000}
	for _, tc := range []struct {
		name   string
		mutate func(*Job, *Profile, *Calibration, *Budget)
		is     error
		says   string
	}{
		{"NegativePrompt", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) { j.PromptTokens = -5 }, ErrBadJob, "prompt_tokens must be ≥ 1"},
		{"ZeroMaxTokens", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) { j.MaxTokens = 0 }, ErrBadJob, "max_tokens must be ≥ 1, got 0"},
		{"NegativeMaxTokens", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) { j.MaxTokens = -1 }, ErrBadJob, "max_tokens must be ≥ 1, got -1"},
		{"NegativeSlots", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) { j.Slots = -2 }, ErrBadJob, "slots must be within [0, 256] (0 means 1), got -2"},
		{"TooManySlots", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) { j.Slots = 1 << 40 }, ErrBadJob, "slots must be within [0, 256]"},
		{"BeyondTrainedContext", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) { j.PromptTokens = 262000 }, ErrBadJob, "exceeds the trained context of 262,144"},
		{"HugeTokens", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) { j.MaxTokens = 1 << 62 }, ErrBadJob, "exceeds the trained context"},
		{"BadKV", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) { j.Policy.KV = ForceKV(7) }, ErrBadJob, `policy kv dtype(?)`},
		{"ChunkBelowMin", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) { j.Policy.MaxChunk = 256 }, ErrBadJob, "max_chunk 256 is below the backend's smallest chunk 512"},
		{"BadPreference", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) {
			j.Policy.Preference = []Dimension{DimKV, DimKV, DimChunk}
		}, ErrBadJob, `names "kv" twice`},
		{"ShortPreference", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) { j.Policy.Preference = []Dimension{DimKV} }, ErrBadJob, "each of kv, mtp and chunk once"},
		{"BadExpertCache", func(j *Job, _ *Profile, _ *Calibration, _ *Budget) { j.Policy.ExpertCache = "maybe" }, ErrBadJob, `expert_cache "maybe"`},
		{"ZeroLimit", func(_ *Job, _ *Profile, _ *Calibration, b *Budget) { b.LimitMiB = 0 }, ErrBadBudget, "limit_mib must be > 0, got 0"},
		{"MarginEatsLimit", func(_ *Job, _ *Profile, _ *Calibration, b *Budget) { b.MarginMiB = redLiteLimit }, ErrBadBudget, "leaves nothing"},
		{"NegativeMargin", func(_ *Job, _ *Profile, _ *Calibration, b *Budget) { b.MarginMiB = -1 }, ErrBadBudget, "margin_mib must be ≥ 0"},
		{"NoKV", func(_ *Job, p *Profile, _ *Calibration, _ *Budget) { p.KVBytesPerPosition.F16 = 0 }, ErrBadProfile, "kv_bytes_per_position.f16 must be > 0"},
		{"NoDense", func(_ *Job, p *Profile, _ *Calibration, _ *Budget) { p.DenseBytes = 0 }, ErrBadProfile, "dense_bytes must be > 0"},
		{"CacheBelowRaw", func(_ *Job, p *Profile, _ *Calibration, _ *Budget) { p.ExpertCacheBytes-- }, ErrBadProfile, "expert_cache_bytes"},
		{"NegativeBase", func(_ *Job, _ *Profile, c *Calibration, _ *Budget) { c.BaseMiB = -1 }, ErrBadCalibration, "base_mib must be ≥ 0"},
		{"BadAlignment", func(_ *Job, _ *Profile, c *Calibration, _ *Budget) { c.AlignmentBytes = 3000 }, ErrBadCalibration, "alignment_bytes must be a power of two"},
		{"BadStatus", func(_ *Job, _ *Profile, c *Calibration, _ *Budget) { c.Status = "guess" }, ErrBadCalibration, `status "guess"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, pp, cc, bb := ok, p, c, b
			tc.mutate(&j, &pp, &cc, &bb)
			_, err := Choose(j, pp, cc, bb)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err = %v, want %v saying %q", err, tc.is, tc.says)
			}
		})
	}
}

func TestEstimateRejects(t *testing.T) {
	p, c := redLiteProfile(t), RedLiteMetal()
	good := full(p, 4096, ml.F32, 512, false)
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		says   string
	}{
		{"ZeroContext", func(c *Config) { c.Context = 0 }, "context 0 must be within [1, 262144]"},
		{"ZeroSlots", func(c *Config) { c.Slots = 0 }, "slots must be ≥ 1"},
		{"SmallChunk", func(c *Config) { c.Chunk = 100 }, "chunk 100 is below the backend's smallest chunk 512"},
		{"BadKV", func(c *Config) { c.KV = 7 }, `kv dtype(?)`},
		{"CacheTooBig", func(c *Config) { c.Residency, c.ExpertCacheBytes = ResidencyCache, p.ExpertCacheBytes+1 }, "expert cache of"},
		{"HugeSlots", func(c *Config) { c.Slots = 1 << 40 }, "beyond any device"},
		{"HugeChunk", func(c *Config) { c.Chunk = 1 << 62 }, "more scratch than any device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.mutate(&cfg)
			_, err := Estimate(cfg, p, c)
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err = %v, want ErrBadConfig saying %q", err, tc.says)
			}
		})
	}
	noMTP := p
	noMTP.MTPBytes = 0
	good.MTP = true
	if _, err := Estimate(good, noMTP, c); !errors.Is(err, ErrBadConfig) {
		t.Errorf("MTP on a model without MTP: err = %v", err)
	}
	// A model without MTP never gets MTP alternatives.
	plan, err := Choose(Job{PromptTokens: 3000, MaxTokens: 1000}, noMTP, c, budget(redLiteLimit))
	if err != nil {
		t.Fatal(err)
	}
	if plan.MTP || len(plan.Alternatives) != 6 {
		t.Errorf("without MTP: chose MTP=%v among %d alternatives, want false among 6", plan.MTP, len(plan.Alternatives))
	}
}

// TestJSONFieldNames pins the snake_case names other programs read.
func TestJSONFieldNames(t *testing.T) {
	p, c := redLiteProfile(t), RedLiteMetal()
	plan, err := Choose(Job{PromptTokens: 3000, MaxTokens: 1000}, p, c, budget(redLiteLimit))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"context", "slots", "kv", "chunk", "mtp", "residency", "expert_cache_bytes",
		"prompt_tokens", "max_tokens", "need_mib", "limit_mib", "gpu_limit_mib", "margin_mib", "budget_source",
		"headroom_mib", "calibration", "calibration_status", "preference", "breakdown", "alternatives"} {
		if _, ok := m[k]; !ok {
			t.Errorf("plan JSON lacks %q: %s", k, b)
		}
	}
	var back Plan
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if d := diff(plan, back); d != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", d)
	}
}

// FuzzChoose checks on arbitrary numbers that Choose never panics, that a plan it returns
// fits, and that a does-not-fit answer's advice holds.
func FuzzChoose(f *testing.F) {
	f.Add(3000, 1000, 1, int64(redLiteLimit), int64(0), 0, uint8(0))
	f.Add(120000, 4000, 1, int64(redLiteLimit), int64(0), 0, uint8(0))
	f.Add(100, 100, 4, int64(16000), int64(50), 1024, uint8(7))
	f.Add(-1, 0, -1, int64(0), int64(-1), -3, uint8(255))
	p, c := redLiteProfile(f), RedLiteMetal()
	f.Fuzz(func(t *testing.T, prompt, maxTokens, slots int, limit, margin int64, maxChunk int, knobs uint8) {
		job := Job{PromptTokens: prompt, MaxTokens: maxTokens, Slots: slots,
			Policy: Policy{MaxChunk: maxChunk, DisableMTP: knobs&1 != 0}}
		job.Policy.KV = []*ml.DType{nil, ForceKV(ml.F32), ForceKV(ml.F16), nil}[knobs>>1&3]
		job.Policy.ExpertCache = []ExpertCachePolicy{"", CacheNever, CacheAllow, CacheAuto}[knobs>>3&3]
		b := Budget{LimitMiB: limit, MarginMiB: margin, Source: SourceOverride}
		plan, err := Choose(job, p, c, b)
		var dnf *DoesNotFitError
		switch {
		case err == nil:
			if plan.NeedMiB > b.UsableMiB() || plan.HeadroomMiB < 0 {
				t.Fatalf("plan needs %d MiB over %d", plan.NeedMiB, b.UsableMiB())
			}
		case errors.As(err, &dnf):
			if dnf.NeedMiB <= dnf.LimitMiB {
				t.Fatalf("does not fit but needs %d ≤ %d", dnf.NeedMiB, dnf.LimitMiB)
			}
			if dnf.MaxTokensFit > 0 {
				j := job
				j.MaxTokens = dnf.MaxTokensFit
				if _, err := Choose(j, p, c, b); err != nil {
					t.Fatalf("advice max_tokens ≤ %d does not fit: %v", dnf.MaxTokensFit, err)
				}
			}
			b.LimitMiB = dnf.SmallestLimitMiB
			if _, err := Choose(job, p, c, b); err != nil {
				t.Fatalf("advice limit ≥ %d MiB does not fit: %v", dnf.SmallestLimitMiB, err)
			}
		case errors.Is(err, ErrBadJob), errors.Is(err, ErrBadBudget):
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}
