//go:build !darwin

package daemon

// wiredLimitMiB: iogpu.wired_limit_mb exists only on macOS.
func wiredLimitMiB() (int64, bool, error) { return 0, false, nil }
