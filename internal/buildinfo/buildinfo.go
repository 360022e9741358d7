// Package buildinfo says which build of Red Lite Batch is running: the version and commit
// (set at link time with -ldflags "-X github.com/redlite/batch/internal/buildinfo.Version=v1.2.3
// -X github.com/redlite/batch/internal/buildinfo.Commit=abc1234", else read from the Go
// build's VCS stamp when there is one) and the Go version.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version and Commit are set at link time; empty means "read the build's stamp".
var (
	Version = ""
	Commit  = ""
)

// Info is one build's identity.
type Info struct {
	Version string `json:"version"` // "devel" for a build without a version
	Commit  string `json:"commit"`  // "unknown" when the build carries none
	Go      string `json:"go"`
}

// Get returns the running binary's Info.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && i.Commit == "" {
				i.Commit = s.Value
			}
		}
	}
	if i.Version == "" {
		i.Version = "devel"
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	if len(i.Commit) > 12 {
		i.Commit = i.Commit[:12]
	}
	return i
}

// Line is the one line --version prints, e.g. "redlited v1.2.3 (commit abc1234, go1.26.8)".
func (i Info) Line(program string) string {
	return fmt.Sprintf("%s %s (commit %s, %s, %s/%s)", program, i.Version, i.Commit, i.Go, runtime.GOOS, runtime.GOARCH)
}
