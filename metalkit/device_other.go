//go:build !(darwin && cgo)

package metalkit

// DefaultDevice returns ErrUnavailable: there is no Metal here.
func DefaultDevice() (Device, error) { return Device{}, ErrUnavailable }
