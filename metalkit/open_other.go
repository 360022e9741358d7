//go:build !darwin

package metalkit

import "github.com/redlite/batch/metalkit/device"

func openMetal() (device.Device, error) { return nil, ErrNeedsMacOS }
