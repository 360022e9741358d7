package planner

import (
	"fmt"
	"math"
)

// BudgetSource says where a GPU limit comes from.
type BudgetSource string

const (
	// SourceMetal is MTLDevice.recommendedMaxWorkingSetSize (raised by iogpu.wired_limit_mb).
	SourceMetal BudgetSource = "metal"
	// SourceOverride is an explicit limit from configuration or the command line.
	SourceOverride BudgetSource = "override"
	// SourceRAMFraction is a configured fraction of physical memory (Linux, CPU backend).
	SourceRAMFraction BudgetSource = "ram_fraction"
)

// DefaultMarginMiB is the safety margin when none is configured: 0 MiB. The limit a Mac
// reports is already a recommendation that leaves the rest of memory to the system, and the
// calibration is fitted to what the engine actually allocates, so a margin on top would count
// the same headroom twice and refuse jobs that run (Red Lite ran a 21,722 MiB plan at a 21,741
// MiB limit). Workers that share the GPU with other programs should configure one.
const DefaultMarginMiB = 0

// DefaultRAMFraction is the share of physical memory a Linux worker plans into when no limit
// is configured: the rest stays with the system, the daemon and the page cache.
const DefaultRAMFraction = 0.75

// maxLimitMiB (1 PiB) keeps byte arithmetic on limits far from overflow.
const maxLimitMiB = 1 << 30

// Budget is the memory one worker may plan into.
type Budget struct {
	// LimitMiB is the device limit.
	LimitMiB int64 `json:"limit_mib"`
	// MarginMiB is kept free below LimitMiB; zero means DefaultMarginMiB.
	MarginMiB int64        `json:"margin_mib"`
	Source    BudgetSource `json:"source"`
}

// BudgetFromRAM makes a budget of fraction × totalBytes of physical memory, rounded down to a
// MiB.
func BudgetFromRAM(totalBytes int64, fraction float64) (Budget, error) {
	if totalBytes <= 0 {
		return Budget{}, fmt.Errorf("%w: physical memory must be > 0 bytes, got %d", ErrBadBudget, totalBytes)
	}
	if !(fraction > 0 && fraction <= 1) {
		return Budget{}, fmt.Errorf("%w: RAM fraction must be within (0, 1], got %v", ErrBadBudget, fraction)
	}
	limit := int64(math.Floor(float64(totalBytes) * fraction / MiB))
	b := Budget{LimitMiB: limit, MarginMiB: DefaultMarginMiB, Source: SourceRAMFraction}
	return b, b.Validate()
}

// Validate reports what makes the budget unusable.
func (b Budget) Validate() error {
	switch {
	case b.LimitMiB <= 0:
		return fmt.Errorf("%w: limit_mib must be > 0, got %d", ErrBadBudget, b.LimitMiB)
	case b.LimitMiB > maxLimitMiB:
		return fmt.Errorf("%w: limit_mib %d is beyond any device (max %d)", ErrBadBudget, b.LimitMiB, maxLimitMiB)
	case b.MarginMiB < 0:
		return fmt.Errorf("%w: margin_mib must be ≥ 0, got %d", ErrBadBudget, b.MarginMiB)
	case b.MarginMiB >= b.LimitMiB:
		return fmt.Errorf("%w: margin_mib %d leaves nothing of limit_mib %d", ErrBadBudget, b.MarginMiB, b.LimitMiB)
	}
	return nil
}

// UsableMiB is what plans may use: the limit less the margin.
func (b Budget) UsableMiB() int64 { return b.LimitMiB - b.MarginMiB }
