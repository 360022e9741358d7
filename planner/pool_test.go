package planner

import (
	"errors"
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
	_, err := PlanPool(p, c, Budget{LimitMiB: 8 * 1024, Source: "test"}, Policy{}, 4, 512, 256)
	if !errors.Is(err, ErrDoesNotFit) {
		t.Errorf("a budget below the weights: %v, want ErrDoesNotFit", err)
	}
	if _, err := PlanPool(p, c, Budget{LimitMiB: 8 * 1024, Source: "test"}, Policy{}, 0, 512, 256); !errors.Is(err, ErrBadJob) {
		t.Errorf("0 slots: %v, want ErrBadJob", err)
	}
}
