//go:build !linux

package cpu

// hostBytes returns n zeroed bytes for a weight's repacked layout (hostmem_linux.go asks
// Linux for 2 MiB pages).
func hostBytes[T any](_ *T, n int) ([]byte, bool) { return make([]byte, n), false }

// dropHostBytes lets b go; the collector frees it once nothing holds it.
func dropHostBytes([]byte) {}

// physicalMemory is the machine's RAM in bytes: unknown here.
func physicalMemory() int64 { return 0 }
