package daemon

import (
	"fmt"

	"github.com/redlite/batch/metalkit"
	"github.com/redlite/batch/planner"
)

// DeviceBudget returns the memory this worker plans every job into: REDLITE_GPU_LIMIT_MIB
// when set; else, on a Mac, the Metal device's recommendedMaxWorkingSetSize (metalkit); else
// REDLITE_RAM_FRACTION of physical memory. It is a variable so that tests can pin it.
var DeviceBudget = func(cfg Config) (planner.Budget, error) {
	if cfg.GPULimitMiB > 0 {
		b := planner.Budget{LimitMiB: cfg.GPULimitMiB, MarginMiB: cfg.MarginMiB, Source: planner.SourceOverride}
		return b, b.Validate()
	}
	// On a Mac the Metal device says what the GPU can hold; elsewhere metalkit has no device
	// and the limit is a share of physical memory.
	if dev, err := metalkit.DefaultDevice(); err == nil {
		b := planner.Budget{LimitMiB: dev.LimitMiB(), MarginMiB: cfg.MarginMiB, Source: planner.SourceMetal}
		return b, b.Validate()
	}
	total, err := physicalMemory()
	if err != nil {
		return planner.Budget{}, fmt.Errorf("REDLITE_GPU_LIMIT_MIB is required on this system: %w", err)
	}
	b, err := planner.BudgetFromRAM(total, cfg.RAMFraction)
	if err != nil {
		return planner.Budget{}, err
	}
	b.MarginMiB = cfg.MarginMiB
	return b, b.Validate()
}

// withHostWeights keeps the backend's own copies of the weights (repacked rows for the 8-bit
// kernels, hostBytes) out of what the planner plans into, which counts the mapped file as the
// weights: they join the margin.
func withHostWeights(b planner.Budget, hostBytes int64) planner.Budget {
	if hostBytes > 0 {
		b.MarginMiB = max(b.MarginMiB, planner.DefaultMarginMiB) + (hostBytes+planner.MiB-1)/planner.MiB
	}
	return b
}
