package daemon

import (
	"fmt"
	"syscall"
)

// physicalMemory is the machine's RAM in bytes.
func physicalMemory() (int64, error) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, fmt.Errorf("sysinfo: %w", err)
	}
	return int64(si.Totalram) * int64(si.Unit), nil
}
