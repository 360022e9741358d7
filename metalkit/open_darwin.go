package metalkit

import (
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
	"github.com/redlite/batch/metalkit/mtl"
)

// openMetal makes the Metal device with this package's kernels.
func openMetal() (device.Device, error) { return mtl.New(kernels.Source()) }
