// Package ops holds no code: these tests check the operator's files in ops/,
// docker-compose.yml, Dockerfile and .dockerignore against each other and against the real
// daemon. Docker cannot run where they were written, so every claim of those files that can
// be checked without an engine is checked here: the compose file's structure and its shell
// commands (run with sh), the Redis configuration (on a real redis-server), the image's
// build step (go build on the context .dockerignore leaves), Prometheus's configuration and
// rules (promtool, when installed), the Grafana dashboard's queries (against a live
// /metrics scrape of a running daemon) and the launchd plists (parsed as plutil would).
package ops

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/redlite/batch/daemon"
	"github.com/redlite/batch/internal/envconf"
)

// repoPath is a path in the repository; tests run in ops/.
func repoPath(elem ...string) string {
	return filepath.Join(append([]string{".."}, elem...)...)
}

func readFile(t *testing.T, elem ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(repoPath(elem...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// needTool returns the path of a command the test needs. Missing, it fails the test under
// CI=true (CI must install it: the message says how) and skips it otherwise.
func needTool(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		msg := name + " not found on PATH (" + install + ")"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// promtool is Prometheus's checker; Debian ships it in the prometheus package.
func promtool(t *testing.T) string {
	return needTool(t, "promtool", "apt-get install prometheus")
}

// daemonVars is the set of environment variables daemon.Config reads.
func daemonVars() map[string]bool {
	vars := map[string]bool{}
	for _, v := range envconf.Vars[daemon.Config]() {
		vars[v] = true
	}
	return vars
}

// checkDaemonEnv checks that every REDLITE_* variable of env is one the daemon reads and
// that the daemon accepts the whole environment.
func checkDaemonEnv(t *testing.T, where string, env map[string]string) {
	t.Helper()
	known := daemonVars()
	var list []string
	for k, v := range env {
		if strings.HasPrefix(k, "REDLITE_") && !known[k] {
			t.Errorf("%s sets %s, which redlited does not read (daemon.Config)", where, k)
		}
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	if _, err := daemon.ConfigFromEnv(list); err != nil {
		t.Errorf("%s: redlited would refuse this environment: %v", where, err)
	}
}

// portOf is the port of a host:port or :port address.
func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return port
}

// freePort is a TCP port nobody listens on at the moment (never Redis's 6379).
func freePort(t *testing.T) int {
	t.Helper()
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port != 6379 {
			return port
		}
	}
	t.Fatal("the kernel kept offering port 6379")
	return 0
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the regular files under src to dst, leaving out those skip reports
// (paths relative to src, slash-separated; a skipped directory is not entered).
func copyTree(t *testing.T, src, dst string, skip func(rel string, dir bool) bool) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." && skip != nil && skip(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, 0o644)
		}
		return nil // symlinks and devices: not part of a build context here
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}
