// Package metalkit is the Metal side of the engine on macOS: device facts today (the GPU
// working-set limit the planner budgets against), the Metal backend of engine/ml later.
// On other systems, and on macOS without cgo, it is a stub whose functions return
// ErrUnavailable, so everything builds and tests on Linux.
package metalkit

import (
	"errors"
	"fmt"
)

// ErrUnavailable is returned where there is no Metal device (not macOS, no cgo, no GPU).
var ErrUnavailable = errors.New("metalkit: Metal is not available on this system")

// Device describes the default Metal device.
type Device struct {
	Name string
	// RecommendedMaxWorkingSet is MTLDevice.recommendedMaxWorkingSetSize in bytes: what the
	// GPU can keep resident without paging, raised by `sysctl iogpu.wired_limit_mb`.
	RecommendedMaxWorkingSet uint64
	// CurrentAllocated is MTLDevice.currentAllocatedSize: what this process holds now.
	CurrentAllocated uint64
	// UnifiedMemory reports a device sharing memory with the CPU (every Apple Silicon Mac).
	UnifiedMemory bool
}

// LimitMiB is the working-set limit in whole MiB, rounded down.
func (d Device) LimitMiB() int64 { return int64(d.RecommendedMaxWorkingSet >> 20) }

func (d Device) String() string {
	return fmt.Sprintf("%s (working-set limit %d MiB, %d MiB allocated)", d.Name, d.LimitMiB(), d.CurrentAllocated>>20)
}
