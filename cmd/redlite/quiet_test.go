package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/redlite/batch/internal/redistest"
)

// TestMain lets the test binary run as redlite (REDLITE_TEST_AS_CLI=1, the arguments as a
// JSON list in REDLITE_TEST_ARGS), so that a test sees what the process itself writes to
// its stderr, which libraries reach without passing through run's writers.
func TestMain(m *testing.M) {
	if os.Getenv("REDLITE_TEST_AS_CLI") == "1" {
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv("REDLITE_TEST_ARGS")), &args); err != nil {
			os.Stderr.WriteString("REDLITE_TEST_ARGS: " + err.Error() + "\n")
			os.Exit(3)
		}
		os.Exit(runMain(args))
	}
	os.Exit(m.Run())
}

// runProcess runs the CLI as a child process and returns its exit code and output.
func runProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	js, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "REDLITE_TEST_AS_CLI=1", "REDLITE_TEST_ARGS="+string(js))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// TestNoGoRedisLogs: through Sentinel, go-redis logs each primary it selects (and, during a
// failover, each sentinel it cannot reach) from sentinel.go, straight to the process's
// stderr; the CLI's stderr has only its own message.
func TestNoGoRedisLogs(t *testing.T) {
	const master = "mymaster"
	primary := redistest.Start(t)
	sentinels := redistest.StartSentinels(t, 1, master, primary, 1, redistest.SentinelTiming{DownAfterMS: 5000, FailoverTimeoutMS: 10000})
	url := redistest.SentinelURL(sentinels, master, 0)
	code, _, errs := runProcess(t, "status", "no-such-job", "--redis", url)
	if code != 1 || !strings.Contains(errs, "no-such-job") {
		t.Fatalf("status of an unknown job through Sentinel: exit %d, stderr %q; want 1 and a message naming the job", code, errs)
	}
	for _, line := range strings.Split(strings.TrimSpace(errs), "\n") {
		if !strings.HasPrefix(line, "redlite status: ") {
			t.Errorf("stderr has a line the CLI did not write: %q", line)
		}
	}
}
