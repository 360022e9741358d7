package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/internal/testlog"
	"github.com/redlite/batch/jobs"
)

// waitLimit bounds every wait for an event; nothing waits by sleeping. It is a limit for a
// hung test, not a speed: on a loaded 2-core machine a daemon process's start and model load
// took over 30 s (issue 25), and a test that failed there proved nothing about the daemon.
const waitLimit = 3 * time.Minute

// TestMain lets the test binary run as redlited, configured by the environment, so that
// tests can SIGTERM and kill -9 a real daemon process without building one.
func TestMain(m *testing.M) {
	if os.Getenv("REDLITE_TEST_AS_DAEMON") == "1" {
		os.Exit(runAsDaemon())
	}
	os.Exit(m.Run())
}

func runAsDaemon() int {
	cfg, err := ConfigFromEnv(os.Environ())
	if err != nil {
		fmt.Fprintln(os.Stderr, "redlited:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := Run(ctx, cfg, Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "redlited:", err)
		if errors.Is(err, ErrConfig) {
			return 2
		}
		return 1
	}
	return 0
}

type testBundle struct {
	redis  *redistest.Server
	client *jobs.Client
	insp   *asynq.Inspector
	cfg    Config
	model  string
}

// setup starts a Redis and returns the configuration of a daemon that serves the tiny
// fixture model from it, with short polling intervals.
func setup(t *testing.T, opts ...redistest.Option) *testBundle {
	t.Helper()
	r := redistest.Start(t, opts...)
	b := setupURL(t, r.URL(0))
	b.redis = r
	return b
}

// setupURL is setup for a Redis that the test started itself, at redisURL.
func setupURL(t *testing.T, redisURL string) *testBundle {
	t.Helper()
	model := fixtures.Path(t, "models", "tiny-qwen3-Q8_0.gguf")
	cfg := DefaultConfig()
	cfg.RedisURL = redisURL
	cfg.Model = model
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.WorkerName = "test-worker"
	cfg.Backend = "cpu" // auto would take the GPU on a Mac; the tests expect the reference
	cfg.GPULimitMiB = 4096
	// The reference dots: on an AVX-512 VNNI CPU the 8-bit path repacks the fixture's
	// Q8_0 output matrix, and the daemon widens its margin by that copy (withHostWeights),
	// which would move the budgets the tests pin to the MiB with the machine's kernels.
	cfg.CPUDot = "exact"
	cfg.MaxChunk = 512
	// One job at a time, planned per job: what most tests check (MTP, chunks, expert caches,
	// a cancel within one pass). Batching workers are tested in batch_test.go.
	cfg.Concurrency = 1
	cfg.TaskCheckInterval = 20 * time.Millisecond
	cfg.DelayedTaskCheckInterval = 100 * time.Millisecond
	cfg.ProgressInterval = 10 * time.Millisecond
	cfg.StreamInterval = 10 * time.Millisecond
	cfg.RetryDelay = 100 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.LogLevel = "debug"
	client, err := jobs.NewClient(cfg.RedisURL, jobs.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	ru, _ := redisx.Parse(cfg.RedisURL)
	insp := asynq.NewInspector(ru.AsynqOpt())
	t.Cleanup(func() { insp.Close() })
	return &testBundle{client: client, insp: insp, cfg: cfg, model: model}
}

// startDaemon runs a daemon in-process until the test ends.
func startDaemon(t *testing.T, cfg Config, obs Observer) *Daemon {
	t.Helper()
	d, err := New(cfg, Options{Logger: testlog.New(t, slog.LevelDebug), Registry: prometheus.NewRegistry(), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		d.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(d.Shutdown)
	return d
}

// daemonProcess is redlited as a child process (this test binary, see TestMain).
type daemonProcess struct {
	cmd    *exec.Cmd
	out    *testlog.Buffer
	exited chan struct{}
	err    error
}

func startDaemonProcess(t *testing.T, cfg Config) *daemonProcess {
	t.Helper()
	return startDaemonProcessOn(t, cfg, "")
}

// startDaemonProcessOn starts the daemon process under another host name (its own UTS
// namespace, as root), so that it looks to the others like a worker on another Mac.
func startDaemonProcessOn(t *testing.T, cfg Config, host string) *daemonProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if host != "" {
		cmd = exec.Command("unshare", "--uts", "sh", "-c", `hostname "$1" && shift && exec "$@"`,
			"sh", host, os.Args[0], "-test.run=^$")
	}
	cmd.Env = append(os.Environ(), "REDLITE_TEST_AS_DAEMON=1",
		"REDLITE_REDIS_URL="+cfg.RedisURL,
		"REDLITE_MODEL="+cfg.Model,
		"REDLITE_HTTP_ADDR=off",
		"REDLITE_WORKER_NAME="+cfg.WorkerName,
		"REDLITE_GPU_LIMIT_MIB="+fmt.Sprint(cfg.GPULimitMiB),
		"REDLITE_MAX_CHUNK="+fmt.Sprint(cfg.MaxChunk),
		"REDLITE_TASK_CHECK_INTERVAL="+cfg.TaskCheckInterval.String(),
		"REDLITE_DELAYED_TASK_CHECK_INTERVAL="+cfg.DelayedTaskCheckInterval.String(),
		"REDLITE_PROGRESS_INTERVAL="+cfg.ProgressInterval.String(),
		"REDLITE_RETRY_DELAY="+cfg.RetryDelay.String(),
		"REDLITE_SHUTDOWN_TIMEOUT="+cfg.ShutdownTimeout.String(),
		"REDLITE_HIERARCHY_POLL="+cfg.HierarchyPoll.String(),
		"REDLITE_CAPABILITY_TTL="+cfg.CapabilityTTL.String(),
		"REDLITE_CALIBRATION="+cfg.Calibration,
	)
	p := &daemonProcess{cmd: cmd, out: &testlog.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("daemon process output:\n%s", p.out.String())
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit error.
func (p *daemonProcess) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(waitLimit):
		t.Fatalf("daemon process did not exit within %v; output:\n%s", waitLimit, p.out.String())
		return nil
	}
}

// waitFor polls the job's status until cond holds: asynq announces no state change, so
// polling Redis is how anyone learns of one.
func waitFor(t *testing.T, c *jobs.Client, id, what string, cond func(jobs.Status) bool) jobs.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var last jobs.Status
	for {
		st, err := c.Status(ctx, id)
		if err == nil {
			last = st
			if cond(st) {
				return st
			}
		} else if !errors.Is(err, jobs.ErrNotFound) {
			t.Fatalf("status of %s: %v", id, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s: %s did not happen within %v; last status %+v", id, what, waitLimit, last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func decoding(st jobs.Status) bool {
	return st.State == jobs.StateActive && st.Progress != nil && st.Progress.Generated > 0
}

func waitResult(t *testing.T, c *jobs.Client, id string, onProgress func(jobs.Progress)) (jobs.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	return c.Wait(ctx, id, onProgress)
}

func enqueue(t *testing.T, c *jobs.Client, p jobs.Payload, opts ...jobs.EnqueueOption) jobs.Job {
	t.Helper()
	job, err := c.Enqueue(context.Background(), p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

func ptr[T any](v T) *T { return &v }

// longGenerate is a greedy job that runs for many seconds on the tiny model: nothing in its
// 32,768 tokens is an end-of-generation token (greedy decoding of the random model loops
// through ordinary tokens), so only a cancel, deadline or shutdown ends it early.
func longGenerate() *jobs.Generate {
	return &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(jobs.MaxMaxTokens), Temperature: ptr(0.0)}
}

func getURL(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
