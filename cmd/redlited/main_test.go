package main

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/internal/testlog"
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
		{"BadWebhookAllow", []string{"REDLITE_WEBHOOK_ALLOW=10.0.0.0/40"}, `REDLITE_WEBHOOK_ALLOW: "10.0.0.0/40" is not a CIDR`},
		{"HostileModel", []string{"REDLITE_MODEL=" + fixtures.Edit(t, fixtures.Path(t, "models", "tiny-qwen3-Q4_K_M.gguf"), nil, map[string]any{"qwen3.block_count": uint32(1 << 30)})},
			"block_count = 1073741824 exceeds"},
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

// TestJSONLogs: with REDLITE_LOG_FORMAT=json every line redlited writes is JSON, including
// what go-redis (a pub/sub connection lost when Redis stops) and asynq's queue-metrics
// collector (a /metrics scrape while Redis is down) log by themselves.
func TestJSONLogs(t *testing.T) {
	r := redistest.Start(t)
	model := fixtures.Path(t, "models", "tiny-qwen3-Q8_0.gguf")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out testlog.Buffer
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "REDLITE_TEST_AS_REDLITED=1", "REDLITE_LOG_FORMAT=json",
		"REDLITE_REDIS_URL="+r.URL(0), "REDLITE_MODEL="+model, "REDLITE_HTTP_ADDR="+addr, "REDLITE_GPU_LIMIT_MIB=4096")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	waitOutput := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(out.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("redlited did not log %q within 30s:\n%s", what, out.String())
			}
			select {
			case <-exited:
				t.Fatalf("redlited exited (%v) before logging %q:\n%s", waitErr, what, out.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	waitOutput("redlited started")
	r.Stop()
	waitOutput("discarding bad PubSub connection") // go-redis's own logger
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
	}
	waitOutput("Failed to collect metrics data") // the standard log package
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("redlited after SIGTERM: %v", waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("redlited did not stop after SIGTERM")
	}
	for i, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("line %d is not JSON: %s", i+1, line)
		}
	}
}
