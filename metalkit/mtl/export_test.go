package mtl

import (
	"os"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/redlite/batch/metalkit/mtl/standin"
)

// StandIn loads the stand-in runtime (package standin) and installs it, skipping where it
// cannot be built (not Linux on amd64 or arm64, no C compiler) unless $CI is set.
func StandIn(tb testing.TB) (*standin.Lib, Runtime) {
	tb.Helper()
	l, err := standin.Load()
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatal(err)
		}
		tb.Skip(err)
	}
	r := Runtime{
		MsgSend:      l.MsgSend,
		RegisterName: l.RegisterName,
		GetClass:     l.GetClass,
		PoolPush:     l.PoolPush,
		PoolPop:      l.PoolPop,
		CreateDevice: l.CreateDevice,
		Call:         purego.SyscallN,
		RegisterFunc: purego.RegisterFunc,
	}
	if err := installRuntime(r); err != nil {
		tb.Fatal(err)
	}
	return l, r
}
