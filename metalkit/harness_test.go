package metalkit

import (
	"testing"

	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
)

// testDevice is the device the kernel tests run on: the harness's shared device (skipped
// without clang-16, failed on CI without it).
func testDevice(t *testing.T) device.Device { return harnesstest.Device(t) }
