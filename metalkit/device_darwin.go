//go:build darwin && cgo

package metalkit

/*
#cgo CFLAGS: -x objective-c -fobjc-arc
#cgo LDFLAGS: -framework Metal -framework Foundation
#include "device.h"
*/
import "C"

// DefaultDevice reads the default Metal device's facts.
func DefaultDevice() (Device, error) {
	var info C.rl_device_info
	if C.rl_device_default(&info) != 0 {
		return Device{}, ErrUnavailable
	}
	return Device{
		Name:                     C.GoString(&info.name[0]),
		RecommendedMaxWorkingSet: uint64(info.recommended_max_working_set),
		CurrentAllocated:         uint64(info.current_allocated),
		UnifiedMemory:            info.unified_memory != 0,
	}, nil
}
