package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlite/batch/daemon"
	"github.com/redlite/batch/grammar/grammartest"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/jobs"
)

// jobsSetup starts a Redis and, unless noDaemon, an in-process daemon serving the tiny
// fixture model from it; it returns the Redis URL.
func jobsSetup(t *testing.T, withDaemon bool) string {
	t.Helper()
	model := fixtures.Path(t, "models", "tiny-qwen3-Q8_0.gguf")
	r := redistest.Start(t)
	url := r.URL(0)
	if !withDaemon {
		return url
	}
	cfg := daemon.DefaultConfig()
	cfg.RedisURL, cfg.Model, cfg.HTTPAddr, cfg.WorkerName = url, model, "off", "cli-test-worker"
	cfg.GPULimitMiB, cfg.MaxChunk = 4096, 512
	cfg.TaskCheckInterval, cfg.ProgressInterval = 20*time.Millisecond, 10*time.Millisecond
	d, err := daemon.New(cfg, daemon.Options{Logger: discardLogger(), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		d.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(d.Shutdown)
	return url
}

func TestJobCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("the job commands end to end against a worker (-short skips it)")
	}
	url := jobsSetup(t, true)

	var id string
	t.Run("EnqueueGenerateWaitJSON", func(t *testing.T) {
		code, out, errs := runCmd(t, "enqueue", "generate", "--redis", url, "--system", "Be brief.", "--user", "Hello",
			"--max-tokens", "8", "--temperature", "0", "--metadata", `{"n":1}`, "--idempotency-key", "cli-1", "--thinking", "--wait", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var res jobs.Result
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("stdout is not a result: %v\n%s", err, out)
		}
		if res.Usage.CompletionTokens == 0 || compact(res.Metadata) != `{"n":1}` || res.Worker != "cli-test-worker" {
			t.Errorf("result %+v", res)
		}
		if !strings.Contains(errs, "job cli-1 enqueued on default") {
			t.Errorf("stderr %q", errs)
		}
		id = "cli-1"
	})

	t.Run("RoutingAndFleet", func(t *testing.T) {
		code, _, errs := runCmd(t, "enqueue", "generate", "--redis", url, "--prompt", "x", "--model", "no-such-model")
		if code != 1 || !strings.Contains(errs, `no live worker serves "no-such-model" (served: tiny-qwen3)`) {
			t.Errorf("unknown model: exit %d, %q", code, errs)
		}
		code, out, errs := runCmd(t, "enqueue", "generate", "--redis", url, "--prompt", "x", "--model", "no-such-model", "--anyway", "--json")
		var job jobs.Job
		if code != 0 || json.Unmarshal([]byte(out), &job) != nil || job.Queue != "default@no-such-model" {
			t.Errorf("--anyway: exit %d, %s %s", code, out, errs)
		}
		code, out, errs = runCmd(t, "fleet", "--redis", url, "--json")
		var f jobs.Fleet
		if code != 0 || json.Unmarshal([]byte(out), &f) != nil {
			t.Fatalf("fleet --json: exit %d, %s %s", code, out, errs)
		}
		found := false
		for _, c := range f.Buckets {
			found = found || (c.Model == "tiny-qwen3" && slices.Contains(c.Workers, "cli-test-worker") && c.MaxContext > 0)
		}
		if !found {
			t.Errorf("fleet: %+v", f)
		}
		if code, out, _ := runCmd(t, "fleet", "--redis", url); code != 0 || !strings.Contains(out, "cli-test-worker") || !strings.Contains(out, "default@no-such-model") {
			t.Errorf("fleet: exit %d\n%s", code, out)
		}
	})

	t.Run("EnqueueJSONSchema", func(t *testing.T) {
		schema := grammartest.Schemas["person"]
		file := filepath.Join(t.TempDir(), "s.json")
		if err := os.WriteFile(file, []byte(schema), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runCmd(t, "enqueue", "generate", "--redis", url, "--prompt", "JSON:", "--max-tokens", "300", "--temperature", "1",
			"--seed", "3", "--json-schema", file, "--logprobs", "2", "--presence-penalty", "0.5", "--wait", "--json")
		var res jobs.Result
		if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
			t.Fatalf("exit %d: %s %s", code, out, errs)
		}
		if err := grammartest.Validate([]byte(schema), []byte(res.Text)); err != nil || res.Logprobs == nil || len(res.Logprobs.Content) != res.Usage.CompletionTokens {
			t.Errorf("%q: %v; logprobs %+v", res.Text, err, res.Logprobs)
		}
		if err := os.WriteFile(file, []byte(`{"type":"array","uniqueItems":true}`), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errs = runCmd(t, "enqueue", "generate", "--redis", url, "--prompt", "x", "--json-schema", file)
		if code != 2 || !strings.Contains(errs, `keyword "uniqueItems" is not supported`) {
			t.Errorf("uniqueItems: exit %d, stderr %q", code, errs)
		}
	})

	t.Run("EnqueueSummarizeFromFile", func(t *testing.T) {
		doc := filepath.Join(t.TempDir(), "doc.txt")
		if err := os.WriteFile(doc, []byte("The meeting approved the budget."), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runCmd(t, "enqueue", "summarize", "--redis", url, "--input-file", doc, "--style", "one_sentence",
			"--max-tokens", "6", "--priority", "low", "--wait")
		if code != 0 || strings.TrimSpace(out) == "" || !strings.Contains(errs, "finish: ") || !strings.Contains(errs, "decode") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
		}
	})

	t.Run("EnqueueSummarizeHierarchical", func(t *testing.T) {
		code, out, errs := runCmd(t, "enqueue", "summarize", "--redis", url, "--input", "# Minutes\n\nThe meeting approved the budget.",
			"--strategy", "hierarchical", "--max-tokens", "6", "--idempotency-key", "cli-tree", "--wait")
		if code != 0 || strings.TrimSpace(out) == "" || !strings.Contains(errs, "hierarchical summary of 1 pieces on cli-test-worker") ||
			!strings.Contains(errs, "level 0 (map): 1 piece(s)") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
		}
		code, out, errs = runCmd(t, "result", "cli-tree", "--redis", url)
		var res jobs.Result
		if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Strategy != jobs.StrategyHierarchical || !strings.Contains(errs, "level 0 (map)") {
			t.Errorf("result: exit %d (%v), stdout %q, stderr %q", code, err, out, errs)
		}
		if code, _, errs := runCmd(t, "enqueue", "summarize", "--redis", url, "--input", "x", "--strategy", "fast"); code == 0 || !strings.Contains(errs, "strategy: must be one of") {
			t.Errorf("--strategy fast: exit %d, stderr %q", code, errs)
		}
	})

	t.Run("EnqueuePayloadFileNoWait", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "p.json")
		os.WriteFile(f, []byte(`{"version":1,"prompt":"From a file","max_tokens":4}`), 0o644)
		code, out, errs := runCmd(t, "enqueue", "generate", "--redis", url, "--file", f, "--max-tokens", "5")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		c, _ := jobs.NewClient(url, jobs.WithPollInterval(20*time.Millisecond))
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := c.Wait(ctx, strings.TrimSpace(out), nil)
		if err != nil || res.Usage.CompletionTokens != 5 {
			t.Errorf("job from file with --max-tokens 5: %+v, %v", res.Usage, err)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		for _, args := range [][]string{
			{"enqueue", "translate"},
			{"enqueue", "generate", "--redis", url},
			{"enqueue", "generate", "--redis", url, "--prompt", "x", "--max-tokens", "0"},
			{"enqueue", "generate", "--redis", url, "--prompt", "x", "--timeout", "500ms"},
			{"enqueue", "generate", "--redis", url, "--prompt", "x", "--thinking"},
			{"enqueue", "generate", "--redis", url, "--prompt", "x", "--deadline", "2001-01-01T00:00:00Z"},
			{"enqueue", "generate", "--redis", url, "--prompt", "x", "--timeout", "0s"},
			{"enqueue", "generate", "--redis", url, "--prompt", "x", "--metadata", strings.Repeat("[", 40) + strings.Repeat("]", 40)},
			{"enqueue", "generate", "--redis", url, "--prompt", "x", "--metadata", `{"a":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "}"},
			{"enqueue", "summarize", "--redis", url, "--input", "x", "--style", "haiku"},
			{"status"},
			{"status", "a", "b"},
		} {
			if code, _, errs := runCmd(t, args...); code != 2 || errs == "" {
				t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, errs)
			}
		}
		if _, _, errs := runCmd(t, "enqueue", "summarize", "--redis", url, "--input", "x", "--style", "haiku"); !strings.Contains(errs, "instructions.style") {
			t.Errorf("bad style message %q", errs)
		}
	})

	t.Run("StatusResultCancel", func(t *testing.T) {
		code, out, errs := runCmd(t, "status", id, "--redis", url, "--json")
		var st struct {
			State  string       `json:"state"`
			Result *jobs.Result `json:"result"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.State != "completed" || st.Result == nil {
			t.Errorf("status --json: exit %d, %s %s", code, out, errs)
		}
		if code, out, _ := runCmd(t, "status", "--redis", url, id); code != 0 || !strings.Contains(out, "state:     completed") {
			t.Errorf("status: exit %d, %q", code, out)
		}
		code, out, _ = runCmd(t, "result", id, "--redis", url, "--text")
		if code != 0 || strings.TrimSpace(out) == "" {
			t.Errorf("result --text: exit %d, %q", code, out)
		}
		if code, _, errs := runCmd(t, "cancel", id, "--redis", url); code != 1 || !strings.Contains(errs, "already finished") {
			t.Errorf("cancel of a finished job: exit %d, %q", code, errs)
		}
		if code, _, errs := runCmd(t, "result", "no-such-job", "--redis", url); code != 1 || !strings.Contains(errs, "not found") {
			t.Errorf("result of an unknown job: exit %d, %q", code, errs)
		}
	})

	t.Run("CancelRunningAndWorkers", func(t *testing.T) {
		code, out, errs := runCmd(t, "enqueue", "generate", "--redis", url, "--prompt", "Once upon a time",
			"--max-tokens", "32768", "--temperature", "0", "--idempotency-key", "long-1")
		if code != 0 {
			t.Fatalf("enqueue: %s", errs)
		}
		c, _ := jobs.NewClient(url)
		defer c.Close()
		waitUntil(t, func() bool {
			st, err := c.Status(context.Background(), strings.TrimSpace(out))
			return err == nil && st.State == jobs.StateActive
		})
		// asynq publishes a worker's running jobs with its heartbeat, every 5 s. Another
		// subtest's hierarchical parent may be active too, for the moment of each of its
		// checks: look for this job among the active ones.
		var ws []jobs.WorkerServer
		long := -1
		waitUntil(t, func() bool {
			code, out, errs = runCmd(t, "workers", "--redis", url, "--json")
			if code != 0 || json.Unmarshal([]byte(out), &ws) != nil {
				t.Fatalf("workers --json: exit %d, %s %s", code, out, errs)
			}
			if len(ws) != 1 {
				return false
			}
			long = slices.IndexFunc(ws[0].Active, func(a jobs.ActiveJob) bool { return a.ID == "long-1" })
			return long >= 0
		})
		if ws[0].Queues["critical"] != 6 || ws[0].Active[long].Type != "generate" ||
			ws[0].Name != "cli-test-worker" || ws[0].Version == "" || ws[0].Backend != "cpu" {
			t.Errorf("workers --json: %+v", ws)
		}
		if code, out, _ := runCmd(t, "workers", "--redis", url); code != 0 || !strings.Contains(out, "tiny-qwen3") ||
			!strings.Contains(out, "generate long-1") || !strings.Contains(out, "cli-test-worker") {
			t.Errorf("workers: exit %d\n%s", code, out)
		}
		if code, out, errs := runCmd(t, "cancel", "long-1", "--redis", url); code != 0 || !strings.Contains(out, "cancelled") {
			t.Fatalf("cancel: exit %d, %q %q", code, out, errs)
		}
		code, out, _ = runCmd(t, "result", "long-1", "--redis", url)
		var res jobs.Result
		if code != 1 || json.Unmarshal([]byte(out), &res) != nil || res.FinishReason != jobs.FinishCancelled {
			t.Errorf("result of the cancelled job: exit %d, %s", code, out)
		}
	})
}

func TestDashboard(t *testing.T) {
	url := jobsSetup(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dashboard", "--redis", url, "--addr", "127.0.0.1:0", "--read-only"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	base := strings.TrimSuffix(strings.Fields(line)[2], "/")
	for _, path := range []string{"/", "/api/queues"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(body) == 0 {
			t.Errorf("GET %s: %d %q", path, resp.StatusCode, body)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("dashboard exit %d", code)
	}
}

func TestDemo(t *testing.T) {
	if _, err := os.Stat(fixtures.Path(t, "models")); err != nil {
		t.Skip(err)
	}
	t.Run("RedisMissing", func(t *testing.T) {
		t.Setenv("REDLITE_REDIS_URL", "")
		t.Setenv("PATH", t.TempDir())
		code, _, errs := runCmd(t, "demo")
		if code != 1 || !strings.Contains(errs, "redis-server is not on PATH") || !strings.Contains(errs, "apt-get install redis-server") ||
			!strings.Contains(errs, "REDLITE_REDIS_URL=") {
			t.Errorf("exit %d, stderr %q", code, errs)
		}
	})
	t.Run("EndToEnd", func(t *testing.T) {
		redistest.Start(t) // skips (or fails under CI) without redis-server, as the demo needs it
		t.Setenv("REDLITE_REDIS_URL", "")
		t.Setenv("REDLITE_MODEL", "")
		t.Setenv("REDLITE_CACHE_DIR", t.TempDir())
		code, out, errs := runCmd(t, "demo", "--max-tokens", "16")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var res jobs.Result
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("stdout is not a result: %v\n%s", err, out)
		}
		if res.Usage.PromptTokens == 0 || res.Usage.CompletionTokens == 0 || res.Model != "tiny-qwen3" ||
			compact(res.Metadata) != `{"source":"redlite demo"}` {
			t.Errorf("result %+v", res)
		}
		for _, want := range []string{"started redis-server", "meaningless text", "REDLITE_MODEL=", "enqueued summarize job"} {
			if !strings.Contains(errs, want) {
				t.Errorf("stderr lacks %q:\n%s", want, errs)
			}
		}
	})
}

// waitUntil polls cond: asynq announces no state change, so polling Redis is how one learns
// of it.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
