// Package layout holds the tests of the repository's import boundaries (DESIGN's layout
// table): which binary and package may link what. They read `go list -deps`, so a new
// import that crosses a boundary fails here and names the path that crossed it.
package layout

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/redlite/batch/"

// deps lists the module's own packages pkg links (pkg included), and every other
// import path under others.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "./../../"+pkg).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestBoundaries(t *testing.T) {
	touchSources(t)
	for _, c := range []struct {
		pkg    string
		banned []string // import path prefixes
		why    string
	}{
		{"cmd/redlite-api", []string{module + "engine", module + "metalkit", module + "daemon", module + "planner", "github.com/ebitengine/purego"},
			"the API binary holds no engine: it runs beside Redis, not on the Macs"},
		{"daemon", []string{module + "internal/dashboard", module + "api", module + "cmd", "github.com/hibiken/asynqmon", "github.com/chromedp"},
			"the worker links only what the worker runs: dashboards and the HTTP API belong to the CLI and redlite-api"},
		{"jobs", []string{module + "engine", module + "daemon", module + "metalkit", module + "planner", module + "api"},
			"jobs is the leaf of the job contract: clients in any Go program import it"},
		{"api", []string{module + "engine", module + "daemon", module + "metalkit"},
			"the HTTP API holds no engine"},
		{"planner", []string{module + "daemon", module + "jobs", module + "metalkit", "github.com/redis", "github.com/hibiken"},
			"the planner is pure functions of a job, a model profile and a budget"},
		{"grammar/...", []string{module + "engine", module + "daemon", module + "jobs", module + "metalkit", module + "planner", module + "api"},
			"grammar is pure text processing: jobs and the API link it to check a schema at submit, so it holds no engine"},
		{"engine/...", []string{module + "daemon", module + "jobs", module + "metalkit", module + "planner", module + "api"},
			"the engine is a library below everything else"},
	} {
		t.Run(strings.ReplaceAll(c.pkg, "/", "_"), func(t *testing.T) {
			for _, d := range deps(t, c.pkg) {
				for _, b := range c.banned {
					if d == b || strings.HasPrefix(d, b+"/") {
						t.Errorf("%s links %s: %s", c.pkg, d, c.why)
					}
				}
			}
		})
	}
}

// touchSources stats every Go file of the module. go test caches a result by the files a
// test opens or stats, not by what a child process reads: without this, `go list`'s view
// of an edited import would hide behind a cached pass.
func touchSources(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".go") || d.Name() == "go.mod") {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
