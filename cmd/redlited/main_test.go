package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMain lets the test binary run as redlited (run, as main calls it), so that tests
// check the real process's exit status and output.
func TestMain(m *testing.M) {
	if os.Getenv("REDLITE_TEST_AS_REDLITED") == "1" {
		os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// redlited runs the test binary as redlited with args and the extra environment, and
// returns its exit status and output.
func redlited(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), append([]string{"REDLITE_TEST_AS_REDLITED=1", "REDLITE_HTTP_ADDR=off",
		"REDLITE_REDIS_URL=redis://127.0.0.1:1/0"}, env...)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// TestExitStatus: invalid configuration exits 2, as the README says, and a model file that
// cannot be loaded is invalid configuration.
func TestExitStatus(t *testing.T) {
	garbage := filepath.Join(t.TempDir(), "broken.gguf")
	if err := os.WriteFile(garbage, []byte("not a gguf file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"BadValue", []string{"REDLITE_CONCURRENCY=many"}, "REDLITE_CONCURRENCY"},
		{"MissingModel", []string{"REDLITE_MODEL=" + filepath.Join(t.TempDir(), "absent.gguf")}, "REDLITE_MODEL"},
		{"UnloadableModel", []string{"REDLITE_MODEL=" + garbage}, "REDLITE_MODEL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := redlited(t, tc.env)
			if code != 2 || !strings.Contains(out, "invalid configuration") || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want 2 naming %s; output:\n%s", code, tc.want, out)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, out := redlited(t, nil, "--version")
	if code != 0 || !regexp.MustCompile(`^redlited \S+ \(commit \S+, go1\.[0-9.]+, [a-z0-9]+/[a-z0-9]+\)\n$`).MatchString(out) {
		t.Errorf("redlited --version: exit %d, %q", code, out)
	}
}
