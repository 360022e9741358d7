//go:build linux || darwin

package harness

import (
	"os"
	"syscall"
)

// lockFile holds an exclusive lock on path until unlock is called: test processes of several
// packages building the same library wait for one build instead of each compiling it.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
