// Package mtl is the Metal device: metalkit/device.Device over the GPU of an Apple Silicon
// Mac, driven through the Objective-C runtime with github.com/ebitengine/purego (objc_msgSend
// with selectors as strings, as tinygrad's Metal runtime does), so there is no cgo: the
// darwin code cross-compiles and vets on Linux, and release binaries for Macs build without
// Xcode.
//
// It also reads the default device's facts (DefaultFacts) for the memory planner; package
// metalkit re-exports them, and may import this package (metalkit.Open choosing a device),
// so this package imports nothing of metalkit but metalkit/device.
//
// Layout: everything that can be computed without a GPU — the page window of a no-copy
// buffer, MTLSize, the function-constant encoding, dispatch checks, the command-buffer
// split policy, NSError codes to *device.Error — is in files without a build tag and is
// tested on Linux. Every Objective-C message we send is declared once, with its Go
// argument types, in msg.go, and checked against Apple's published signatures
// (testdata/selectors.txt) by a Linux test; the darwin files only call those declarations.
package mtl

import (
	"errors"
	"fmt"
)

// ErrUnavailable is returned where there is no Metal device: not macOS, not Apple Silicon
// (New), or no GPU.
var ErrUnavailable = errors.New("metalkit: Metal is not available on this system")

// ErrUnsupportedGPU is returned, wrapped with ErrUnavailable (so that a backend chosen
// automatically falls back to the CPU), where the Metal device is not of the Apple7 family
// with Metal 3: the M1 and later are; the virtual GPU of GitHub's hosted macOS runners
// (Apple5 family) is not.
var ErrUnsupportedGPU = errors.New("the GPU is not of the Apple7 family with Metal 3 (an M1 or later)")

// Facts describes the default Metal device, as the planner and the daemon's capabilities
// report need it.
type Facts struct {
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
func (f Facts) LimitMiB() int64 { return int64(f.RecommendedMaxWorkingSet >> 20) }

func (f Facts) String() string {
	return fmt.Sprintf("%s (working-set limit %d MiB, %d MiB allocated)", f.Name, f.LimitMiB(), f.CurrentAllocated>>20)
}
