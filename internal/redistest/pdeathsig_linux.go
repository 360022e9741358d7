package redistest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// startChild starts cmd so that the kernel kills it when the test binary dies without running
// its cleanups (a panic, a -timeout), so no redis-server outlives its test.
//
// Pdeathsig fires when the *thread* that forked the child exits, and the Go runtime may end
// threads; so every child is forked from one goroutine locked to a thread that never exits.
func startChild(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	starterOnce.Do(func() {
		starter = make(chan startReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range starter {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	starter <- startReq{cmd, done}
	return <-done
}

type startReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	starterOnce sync.Once
	starter     chan startReq
)
