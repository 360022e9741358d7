package metalkit

import (
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/harness"
	"github.com/redlite/batch/metalkit/kernels"
)

// openHarness makes the harness device over this package's kernels.
func openHarness() (device.Device, error) { return harness.New(kernels.Source()) }
