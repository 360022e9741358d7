package daemon

import (
	"fmt"

	"github.com/redlite/batch/planner"
)

// DeviceBudget returns the memory this worker plans every job into. It is a variable so that
// the Metal backend can replace it on macOS with the device's recommendedMaxWorkingSetSize;
// the default takes REDLITE_GPU_LIMIT_MIB when set and otherwise REDLITE_RAM_FRACTION of
// physical memory (the CPU backend's limit on Linux).
var DeviceBudget = func(cfg Config) (planner.Budget, error) {
	if cfg.GPULimitMiB > 0 {
		b := planner.Budget{LimitMiB: cfg.GPULimitMiB, MarginMiB: cfg.MarginMiB, Source: planner.SourceOverride}
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
