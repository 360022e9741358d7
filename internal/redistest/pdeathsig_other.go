//go:build !linux

package redistest

import "os/exec"

// startChild starts cmd. Outside Linux there is no parent-death signal; t.Cleanup stops the
// server, and a test binary killed by -timeout may leave it running.
func startChild(cmd *exec.Cmd) error { return cmd.Start() }
