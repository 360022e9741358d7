//go:build !linux

package daemon

import "errors"

// physicalMemory is not known here; macOS gets its limit from Metal (DeviceBudget).
func physicalMemory() (int64, error) {
	return 0, errors.New("physical memory is only read on Linux")
}
