package metalkit

import (
	"errors"

	"github.com/redlite/batch/metalkit/device"
)

// openMetal makes the Metal device with this package's kernels.
//
// PENDING: wired to mtl.New(kernels.Source()) when branch mtl (package metalkit/mtl) merges.
func openMetal() (device.Device, error) {
	return nil, errors.New("metalkit: the Metal device (package metalkit/mtl) is not in this build yet")
}
