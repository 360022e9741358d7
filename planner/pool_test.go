package planner

import (
	"errors"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/ml"
)

// TestPlanPool sizes pools on the Qwen3-Next profile of the other tests: the pool is the
// largest that fits, f32 while it leaves every slot PoolMinSlotContext positions, f16 below
// that, and a budget that cannot hold one block per slot is refused naming the setting.
func TestPlanPool(t *testing.T) {
	p, c := redLiteProfile(t), RedLiteMetal()
	for _, tc := range []struct {
		limit int64
		slots int
		kv    ml.DType
	}{
		{48 * 1024, 4, ml.F32},
		{19700, 4, ml.F16},
		{24 * 1024, 4, ml.F32},
		{24 * 1024, 1, ml.F32},
	} {
		b := Budget{LimitMiB: tc.limit, Source: "test"}
		pool, err := PlanPool(p, c, b, Policy{}, tc.slots, 512, 256)
		if err != nil {
			t.Fatalf("%d MiB, %d slots: %v", tc.limit, tc.slots, err)
		}
		if pool.KV != tc.kv || pool.NeedMiB > b.UsableMiB() || pool.Blocks%tc.slots != 0 || pool.SlotContext != pool.Blocks*256/tc.slots {
			t.Errorf("%d MiB, %d slots: %+v", tc.limit, tc.slots, pool)
		}
		// One more block per slot would not fit.
		more, err := Estimate(Config{Context: pool.SlotContext + 256, Slots: tc.slots, KV: pool.KV, Chunk: 512, Residency: ResidencyFull}, p, c)
		if err == nil && more.NeedMiB() <= b.UsableMiB() && pool.SlotContext+256 <= p.ContextLength {
			t.Errorf("%d MiB, %d slots: a pool of %d positions per slot fits too (%d MiB)", tc.limit, tc.slots, pool.SlotContext+256, more.NeedMiB())
		}
		t.Logf("%d MiB, %d slots: %s KV, %d blocks, %d positions per slot, %d MiB", tc.limit, tc.slots, pool.KV, pool.Blocks, pool.SlotContext, pool.NeedMiB)
	}
	_, err := PlanPool(p, c, Budget{LimitMiB: 8 * 1024, Source: "test"}, Policy{ExpertCache: CacheNever}, 4, 512, 256)
	if !errors.Is(err, ErrDoesNotFit) || !strings.Contains(err.Error(), "REDLITE_CONCURRENCY") || strings.Contains(err.Error(), "expert cache") {
		t.Errorf("a budget below the weights, no cache allowed: %v, want ErrDoesNotFit naming REDLITE_CONCURRENCY", err)
	}
	if _, err := PlanPool(p, c, Budget{LimitMiB: 8 * 1024, Source: "test"}, Policy{}, 0, 512, 256); !errors.Is(err, ErrBadJob) {
		t.Errorf("0 slots: %v, want ErrBadJob", err)
	}
}

// TestPlanPoolResidency checks the choice between every expert resident and a bounded cache
// on the Qwen3-Next-80B IQ2_XXS profile (4 slots, steps of 512 tokens, blocks of 256):
// a budget where full residency leaves every slot PoolMinSlotContext positions keeps every
// expert; a tighter one keeps exactly that pool beside the largest cache that fits (a MiB
// more would not); one that cannot hold even the smallest cache beside it is refused with the
// numbers; and a fully resident pool shorter than the minimum is kept when no cache of the
// minimum fits beside the minimum pool.
func TestPlanPoolResidency(t *testing.T) {
	p, c := redLiteProfile(t), RedLiteMetal()
	const slots, step, block = 4, 512, 256
	plan := func(limit int64, pol Policy) (Pool, error) {
		return PlanPool(p, c, Budget{LimitMiB: limit, Source: "test"}, pol, slots, step, block)
	}
	t.Run("FitsFull", func(t *testing.T) {
		// Red Lite's 24 GiB M4 Pro limit.
		pool, err := plan(21741, Policy{})
		if err != nil {
			t.Fatal(err)
		}
		if pool.Residency != ResidencyFull || pool.ExpertCacheBytes != p.ExpertCacheBytes || pool.SlotContext < PoolMinSlotContext {
			t.Errorf("21,741 MiB: %+v, want every expert resident and ≥ %d positions per slot", pool, PoolMinSlotContext)
		}
		t.Logf("21,741 MiB: %s KV, %d positions per slot, experts %s, %d MiB", pool.KV, pool.SlotContext, pool.Residency, pool.NeedMiB)
	})
	t.Run("TightCache", func(t *testing.T) {
		// 2/3 of a 16 GiB Mac's memory, and a budget a MiB short of the fully resident pool
		// of PoolMinSlotContext per slot.
		fullMin, err := Estimate(Config{Context: PoolMinSlotContext, Slots: slots, KV: ml.F16, Chunk: step, Residency: ResidencyFull}, p, c)
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int64{10922, fullMin.NeedMiB() - 1} {
			pool, err := plan(limit, Policy{})
			if err != nil {
				t.Fatalf("%d MiB: %v", limit, err)
			}
			if pool.Residency != ResidencyCache || pool.SlotContext != PoolMinSlotContext || pool.KV != ml.F16 ||
				pool.ExpertCacheBytes < p.MinCacheBytes() || pool.ExpertCacheBytes >= p.ExpertCacheBytes || pool.NeedMiB > limit {
				t.Fatalf("%d MiB: %+v, want a cache beside %d f16 positions per slot", limit, pool, PoolMinSlotContext)
			}
			// The largest cache: one MiB more does not fit.
			more, err := Estimate(Config{Context: pool.SlotContext, Slots: slots, KV: pool.KV, Chunk: step, Residency: ResidencyCache, ExpertCacheBytes: pool.ExpertCacheBytes + MiB}, p, c)
			if err != nil || more.NeedMiB() <= limit {
				t.Errorf("%d MiB: a cache of %d MiB fits too (%d MiB, %v)", limit, pool.ExpertCacheBytes/MiB+1, more.NeedMiB(), err)
			}
			t.Logf("%d MiB: %s KV, %d positions per slot, expert cache %d MiB of %d (%.0f%%), %d MiB", limit, pool.KV, pool.SlotContext,
				pool.ExpertCacheBytes/MiB, p.ExpertCacheBytes/MiB, 100*float64(pool.ExpertCacheBytes)/float64(p.ExpertCacheBytes), pool.NeedMiB)
		}
		// f32 forced: the cache is what f32 leaves.
		pool, err := plan(10922, Policy{KV: ForceKV(ml.F32)})
		if err != nil || pool.KV != ml.F32 || pool.Residency != ResidencyCache {
			t.Errorf("f32 forced: %+v, %v", pool, err)
		}
	})
	t.Run("TooTight", func(t *testing.T) {
		_, err := plan(2048, Policy{})
		if !errors.Is(err, ErrDoesNotFit) {
			t.Fatalf("2,048 MiB: %v, want ErrDoesNotFit", err)
		}
		minCache, _ := Estimate(Config{Context: PoolMinSlotContext, Slots: slots, KV: ml.F16, Chunk: step, Residency: ResidencyCache, ExpertCacheBytes: p.MinCacheBytes()}, p, c)
		for _, want := range []string{"4 slots", "every expert resident", Commas(minCache.NeedMiB()) + " MiB for 4,096 positions each",
			"smallest expert cache of " + Commas(ceilDiv(p.MinCacheBytes(), MiB)) + " MiB", "the limit is 2,048 MiB", "REDLITE_CONCURRENCY"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	})
	t.Run("ShortFullBeatsNoCache", func(t *testing.T) {
		// A model whose experts are small beside the KV of the minimum pool: every expert
		// resident with a shorter pool, since the minimum pool leaves no room for a layer.
		q := p
		q.ExpertLayerCount, q.ExpertBytes, q.ExpertCacheBytes = 2, 64*MiB, 64*MiB
		b := Budget{LimitMiB: q.DenseBytes/MiB + int64(c.BaseMiB) + 600, Source: "test"}
		pool, err := PlanPool(q, c, b, Policy{}, slots, step, block)
		if err != nil {
			t.Fatal(err)
		}
		if pool.Residency != ResidencyFull || pool.SlotContext >= PoolMinSlotContext {
			t.Errorf("%+v, want a fully resident pool shorter than %d per slot", pool, PoolMinSlotContext)
		}
	})
}

// TestPlanPoolPrefixCache: a hybrid model's prefix cache is planned beside the pool, which
// shrinks by it; a dense model's holds nothing beside the pool and costs nothing.
func TestPlanPoolPrefixCache(t *testing.T) {
	p, c := redLiteProfile(t), RedLiteMetal()
	b := Budget{LimitMiB: 24 * 1024, Source: "test"}
	without, err := PlanPool(p, c, b, Policy{}, 4, 512, 256)
	if err != nil {
		t.Fatal(err)
	}
	with, err := PlanPool(p, c, b, Policy{PrefixCacheMiB: 512}, 4, 512, 256)
	if err != nil {
		t.Fatal(err)
	}
	if with.Breakdown.PrefixCacheBytes != 512*MiB || with.Blocks >= without.Blocks || with.NeedMiB > b.UsableMiB() {
		t.Errorf("with a 512 MiB prefix cache: %d blocks (%d without), breakdown %+v", with.Blocks, without.Blocks, with.Breakdown)
	}
	dense := p
	dense.RecurrentStateBytes = 0
	br, err := Estimate(Config{Context: 4096, Slots: 2, KV: ml.F16, Chunk: 512, Residency: ResidencyFull, PrefixCacheBytes: 512 * MiB}, dense, c)
	if err != nil || br.PrefixCacheBytes != 0 {
		t.Errorf("a dense model's prefix cache: %d bytes planned, %v; want 0", br.PrefixCacheBytes, err)
	}
}
