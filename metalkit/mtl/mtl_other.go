//go:build !darwin

package mtl

import "github.com/redlite/batch/metalkit/device"

// DefaultFacts returns ErrUnavailable: there is no Metal here.
func DefaultFacts() (Facts, error) { return Facts{}, ErrUnavailable }

// New returns ErrUnavailable: there is no Metal here (the harness device runs the same
// kernels on Linux).
func New(source string) (device.Device, error) { return nil, ErrUnavailable }
