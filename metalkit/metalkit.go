// Package metalkit is the Metal side of the engine: device facts (the GPU working-set limit
// the planner budgets against) and the Metal backend of engine/ml over a device.Device — the
// Metal device of package metalkit/mtl on a Mac, the harness elsewhere. The Objective-C
// calls are in metalkit/mtl, through purego without cgo, so everything builds on any
// system; where there is no Metal, DefaultDevice returns ErrUnavailable.
package metalkit

import "github.com/redlite/batch/metalkit/mtl"

// ErrUnavailable is returned where there is no Metal device (not macOS, no GPU). It is
// mtl.ErrUnavailable, so errors.Is holds for either name.
var ErrUnavailable = mtl.ErrUnavailable

// Device describes the default Metal device: its name, working-set limit, current
// allocation and unified memory (defined in metalkit/mtl, which reads them).
type Device = mtl.Facts

// DefaultDevice reads the default Metal device's facts.
func DefaultDevice() (Device, error) { return mtl.DefaultFacts() }
