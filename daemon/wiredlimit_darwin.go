//go:build darwin

package daemon

import "golang.org/x/sys/unix"

// wiredLimitMiB reads the sysctl iogpu.wired_limit_mb (no cgo: x/sys calls libSystem).
func wiredLimitMiB() (int64, bool, error) {
	v, err := unix.SysctlUint32("iogpu.wired_limit_mb")
	if err != nil {
		return 0, true, err
	}
	return int64(v), true, nil
}
