package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/internal/testlog"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/planner"
)

func TestSIGTERM(t *testing.T) {
	t.Run("JobFinishesWithinTimeout", func(t *testing.T) {
		b := setup(t)
		b.cfg.ShutdownTimeout = waitLimit
		p := startDaemonProcess(t, b.cfg)
		job := enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(1500), Temperature: ptr(0.0)})
		waitFor(t, b.client, job.ID, "decoding", decoding)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.wait(t); err != nil {
			t.Fatalf("daemon exit after SIGTERM: %v", err)
		}
		res, err := b.client.Result(context.Background(), job.ID)
		if err != nil {
			t.Fatalf("job after a graceful stop: %v", err)
		}
		if res.Usage.CompletionTokens != 1500 {
			t.Errorf("result %+v", res)
		}
	})

	t.Run("JobBackInQueueAfterTimeout", func(t *testing.T) {
		b := setup(t)
		b.cfg.ShutdownTimeout = 200 * time.Millisecond
		p := startDaemonProcess(t, b.cfg)
		job := enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(3000), Temperature: ptr(0.0)})
		waitFor(t, b.client, job.ID, "decoding", decoding)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.wait(t); err != nil {
			t.Fatalf("daemon exit after SIGTERM: %v", err)
		}
		st, err := b.client.Status(context.Background(), job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != jobs.StatePending || st.Retried != 0 {
			t.Fatalf("after SIGTERM the job is %s (retried %d), want pending and not counted as a failure", st.State, st.Retried)
		}
		// And it runs to the end on the next daemon.
		startDaemon(t, b.cfg, Observer{})
		res, err := waitResult(t, b.client, job.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Usage.CompletionTokens != 3000 {
			t.Errorf("result %+v", res)
		}
	})
}

// TestKill9 kills the daemon mid-job. The job's lease brings it back: the dead worker stops
// extending its 30-second lease, and a live server's recoverer moves a job whose lease
// expired 30 seconds ago or more to retry (asynq's, or the orphan finder's first, which
// also has the dead process's record). The test moves the lease's expiry one minute back
// in Redis, as if that minute had passed, and starts a new daemon.
func TestKill9(t *testing.T) {
	b := setup(t)
	p := startDaemonProcess(t, b.cfg)
	job := enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(1000), Temperature: ptr(0.0)})
	waitFor(t, b.client, job.ID, "decoding", decoding)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	st, err := b.client.Status(context.Background(), job.ID)
	if err != nil || st.State != jobs.StateActive {
		t.Fatalf("after kill -9: %+v, %v; want the job still active (leased to the dead worker)", st, err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: b.redis.Addr()})
	defer rdb.Close()
	lease := "asynq:{" + job.Queue + "}:lease"
	expired := time.Now().Add(-61 * time.Second).Unix()
	if n, err := rdb.ZAddXX(context.Background(), lease, redis.Z{Score: float64(expired), Member: job.ID}).Result(); err != nil || n != 0 {
		// ZADD XX reports 0 added for an update.
		t.Fatalf("move the lease back: %d, %v", n, err)
	}
	if score, err := rdb.ZScore(context.Background(), lease, job.ID).Result(); err != nil || int64(score) != expired {
		t.Fatalf("lease score %v, %v", score, err)
	}

	b.cfg.WorkerName = "second-worker"
	startDaemon(t, b.cfg, Observer{})
	res, err := waitResult(t, b.client, job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, _ = b.client.Status(context.Background(), job.ID)
	if res.Worker != "second-worker" || res.Usage.CompletionTokens != 1000 || st.Retried != 1 || !strings.Contains(st.LastError, "lease expired") {
		t.Errorf("rerun: worker %q, %d tokens, retried %d, last error %q", res.Worker, res.Usage.CompletionTokens, st.Retried, st.LastError)
	}
}

// TestHTTPAndRedisRestart checks /healthz, /readyz and /metrics, and that a daemon whose
// Redis restarts reconnects and goes on.
func TestHTTPAndRedisRestart(t *testing.T) {
	// With persistence, as a production Redis has: asynq's client remembers which queues it
	// has registered and would not register them again in an emptied Redis.
	b := setup(t, redistest.WithAOF())
	d := startDaemon(t, b.cfg, Observer{})
	base := "http://" + d.HTTPAddr()
	if code, body := getURL(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := getURL(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz: %d %q", code, body)
	}
	job := enqueue(t, b.client, &jobs.Summarize{Input: "A short note about nothing in particular.", MaxTokens: ptr(16)})
	if _, err := waitResult(t, b.client, job.ID, nil); err != nil {
		t.Fatal(err)
	}

	t.Run("Metrics", func(t *testing.T) {
		code, body := getURL(t, base+"/metrics")
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		for _, re := range []string{
			`redlite_jobs_total\{outcome="completed",type="summarize"\} 1`,
			`redlite_job_duration_seconds_bucket\{outcome="completed",type="summarize",le="\+Inf"\} 1`,
			`redlite_job_queue_wait_seconds`,
			`redlite_prompt_tokens_total\{type="summarize"\} [1-9]`,
			`redlite_generated_tokens_total\{type="summarize"\} [1-9]`,
			`redlite_prefill_tokens_per_second_count\{type="summarize"\} 1`,
			`redlite_decode_tokens_per_second_count\{type="summarize"\} 1`,
			`redlite_jobs_running\{phase="decode"\} 0`,
			`redlite_model_load_seconds [0-9]`,
			`redlite_model_info\{architecture="qwen3",model="tiny-qwen3"\} 1`,
			`redlite_build_info\{backend="cpu",commit="[^"]+",go_version="go1\.[0-9.]+",version="[^"]+"\} 1`,
			`redlite_plans_total\{chunk="512",kv_precision="f32",mtp="false",residency="full"\} [1-9]`,
			`redlite_plan_need_bytes_count [1-9]`,
			`redlite_planned_memory_bytes 0`,
			`redlite_memory_limit_bytes 4\.294967296e\+09`,
			`redlite_progress_writes_total\{outcome="ok"\} [1-9]`,
			`asynq_tasks_processed_total\{queue="default[^"]*"\} [1-9]`,
			`asynq_queue_size\{queue="default[^"]*"\} [0-9]`,
		} {
			if !regexp.MustCompile(`(?m)^` + re).MatchString(body) {
				t.Errorf("/metrics lacks %s", re)
			}
		}
		if t.Failed() {
			t.Logf("/metrics:\n%s", body)
		}
	})

	t.Run("RedisRestart", func(t *testing.T) {
		b.redis.Stop()
		waitHTTP(t, base+"/readyz", 503)
		b.redis.Restart()
		waitHTTP(t, base+"/readyz", 200)
		job := enqueue(t, b.client, &jobs.Generate{Prompt: "After the restart", MaxTokens: ptr(8)})
		if _, err := waitResult(t, b.client, job.ID, nil); err != nil {
			t.Fatalf("job after the Redis restart: %v", err)
		}
	})

	t.Run("RedisOutOfMemory", func(t *testing.T) {
		// A Redis at its maxmemory with noeviction answers PING but refuses every write.
		rdb := redis.NewClient(&redis.Options{Addr: b.redis.Addr()})
		defer rdb.Close()
		if err := rdb.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		code, body := getURL(t, base+"/readyz")
		if err := rdb.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if code != 503 || !strings.Contains(body, "redis is out of memory") {
			t.Errorf("/readyz with Redis full: %d %q; want 503 naming Redis out of memory", code, body)
		}
		if code, body := getURL(t, base+"/readyz"); code != 200 {
			t.Errorf("/readyz once Redis has room again: %d %q", code, body)
		}
	})

	t.Run("NotReadyAfterShutdown", func(t *testing.T) {
		d.http.ready.Store(false) // what Shutdown does first
		if code, body := getURL(t, base+"/readyz"); code != 503 || !strings.Contains(body, "shutting down") {
			t.Errorf("/readyz while shutting down: %d %q", code, body)
		}
		d.http.ready.Store(true)
	})
}

// waitHTTP polls url until it answers code.
func waitHTTP(t *testing.T, url string, code int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	last := 0
	for time.Now().Before(deadline) {
		if last, _ = getURL(t, url); last == code {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling an HTTP probe is what probes are for
	}
	t.Fatalf("%s answered %d, not %d, for %v", url, last, code, waitLimit)
}

// TestRawRedisEnqueue backs jobs/README.md's "Enqueueing with raw Redis commands": a job
// written with plain Redis commands and a hand-encoded TaskMessage (no asynq, no protobuf
// library) runs on the daemon; so does one from jobs/examples/raw_enqueue.py.
func TestRawRedisEnqueue(t *testing.T) {
	b := setup(t)
	// The cancelled job must stay in retry long enough for the test to see it there: with
	// the bundle's 100 ms back-off it may already be running again when the status is read.
	cfg := b.cfg
	cfg.RetryDelay, cfg.MaxRetryDelay = time.Minute, time.Minute
	startDaemon(t, cfg, Observer{})
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: b.redis.Addr()})
	defer rdb.Close()

	payload := []byte(`{"version":1,"input":"Raw Redis enqueue test document.","max_tokens":12,"metadata":{"from":"raw"}}`)
	msg := rawTaskMessage(jobs.TypeSummarize, payload, "raw-1", jobs.QueueDefault, 3, 600, 3600)
	if err := rdb.SAdd(ctx, "asynq:queues", jobs.QueueDefault).Err(); err != nil {
		t.Fatal(err)
	}
	const script = `if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'msg', ARGV[1], 'state', 'pending', 'pending_since', ARGV[3])
redis.call('LPUSH', KEYS[2], ARGV[2])
return 1`
	n, err := rdb.Eval(ctx, script, []string{"asynq:{default}:t:raw-1", "asynq:{default}:pending"}, msg, "raw-1", time.Now().UnixNano()).Int()
	if err != nil || n != 1 {
		t.Fatalf("EVAL: %d, %v", n, err)
	}
	res, err := waitResult(t, b.client, "raw-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.CompletionTokens == 0 || string(res.Metadata) != `{"from":"raw"}` {
		t.Errorf("raw job result %+v", res)
	}
	// What a raw client reads back: the state and the envelope, by plain HGET.
	if st, _ := rdb.HGet(ctx, "asynq:{default}:t:raw-1", "state").Result(); st != "completed" {
		t.Errorf("HGET state = %q", st)
	}
	raw, _ := rdb.HGet(ctx, "asynq:{default}:t:raw-1", "result").Bytes()
	if env, err := jobs.DecodeEnvelope(raw); err != nil || env.Type != jobs.EnvelopeResult {
		t.Errorf("HGET result: %v %+v", err, env)
	}

	t.Run("PublishCancel", func(t *testing.T) {
		// The README's raw cancel: PUBLISH asynq:cancel <id> stops a running job; asynq
		// sends it to retry, with the worker's partial result.
		payload := []byte(`{"version":1,"prompt":"Once upon a time","max_tokens":32768,"temperature":0}`)
		msg := rawTaskMessage(jobs.TypeGenerate, payload, "raw-long", jobs.QueueDefault, 3, 600, 3600)
		if n, err := rdb.Eval(ctx, script, []string{"asynq:{default}:t:raw-long", "asynq:{default}:pending"}, msg, "raw-long", time.Now().UnixNano()).Int(); err != nil || n != 1 {
			t.Fatalf("EVAL: %d, %v", n, err)
		}
		waitFor(t, b.client, "raw-long", "decoding", decoding)
		if err := rdb.Publish(ctx, "asynq:cancel", "raw-long").Err(); err != nil {
			t.Fatal(err)
		}
		st := waitFor(t, b.client, "raw-long", "stop", func(st jobs.Status) bool { return st.State == jobs.StateRetry && st.Result != nil })
		if st.Result.FinishReason != jobs.FinishCancelled || st.Result.Usage.CompletionTokens == 0 || !strings.Contains(st.LastError, "context canceled") {
			t.Errorf("after PUBLISH asynq:cancel: %+v, last error %q", st.Result, st.LastError)
		}
		// Archiving it for good is the Go client's (or redlite cancel's) job.
		cctx, cancel := context.WithTimeout(ctx, waitLimit)
		defer cancel()
		if err := b.client.Cancel(cctx, "raw-long"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Python", func(t *testing.T) {
		py, err := exec.LookPath("python3")
		if err != nil {
			t.Skip("python3 not on PATH; the Go commands above are the same")
		}
		cmd := exec.Command(py, "../jobs/examples/raw_enqueue.py", "--addr", b.redis.Addr(), "--type", jobs.TypeGenerate)
		cmd.Stdin = strings.NewReader(`{"version":1,"prompt":"From Python","max_tokens":6,"priority":"high"}`)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("raw_enqueue.py: %v: %s", err, errb.String())
		}
		res, err := waitResult(t, b.client, strings.TrimSpace(out.String()), nil)
		if err != nil {
			t.Fatal(err)
		}
		// Six tokens, unless the random-weight model sampled its end-of-text token first.
		if res.Usage.CompletionTokens < 1 || res.Usage.CompletionTokens != 6 && res.FinishReason != jobs.FinishStop {
			t.Errorf("python job result %+v", res)
		}
	})
}

// rawTaskMessage hand-encodes asynq's TaskMessage as jobs/README.md describes.
func rawTaskMessage(typ string, payload []byte, id, queue string, retry, timeout, retention int64) []byte {
	var b []byte
	str := func(field int, s []byte) {
		b = binary.AppendUvarint(b, uint64(field<<3|2))
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	num := func(field int, v int64) {
		b = binary.AppendUvarint(b, uint64(field<<3))
		b = binary.AppendUvarint(b, uint64(v))
	}
	str(1, []byte(typ))
	str(2, payload)
	str(3, []byte(id))
	str(4, []byte(queue))
	num(5, retry)
	num(8, timeout)
	num(12, retention)
	return b
}

// TestResultWriteAcrossRedisRestart stops Redis the moment a job has generated its last
// token, so that its result write fails, and starts it again after the first failure: the
// worker must retry the write and complete the job on its first attempt, not throw the
// output away and run the job again.
func TestResultWriteAcrossRedisRestart(t *testing.T) {
	b := setup(t, redistest.WithAOF()) // the job survives the restart, as in production
	const maxTokens = 16
	restarted := make(chan struct{})
	var stopOnce, restartOnce sync.Once // once: a second attempt (the bug) must meet no blip
	startDaemon(t, b.cfg, Observer{
		Token: func(_ context.Context, _ string, n int) {
			if n == maxTokens {
				stopOnce.Do(b.redis.Stop)
			}
		},
		ResultWriteFailed: func(context.Context, string, int, error) {
			restartOnce.Do(func() {
				b.redis.Restart()
				close(restarted)
			})
		},
	})
	job := enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(maxTokens), Temperature: ptr(0.0)})
	select { // a client polling meanwhile would see Redis refuse connections
	case <-restarted:
	case <-time.After(waitLimit):
		t.Fatal("the result write never failed: Redis was not stopped at the right moment")
	}
	res, err := waitResult(t, b.client, job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.client.Status(context.Background(), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != jobs.StateCompleted || st.Retried != 0 || res.Usage.CompletionTokens != maxTokens {
		t.Errorf("after a Redis restart at the result write: state %s, retried %d (last error %q), %d tokens; want completed on the first attempt",
			st.State, st.Retried, st.LastError, res.Usage.CompletionTokens)
	}
}

// TestRedisWrongPassword: a worker given a wrong Redis password says it is an
// authentication failure, in its log and in /readyz, without repeating the password there
// or in /metrics.
func TestRedisWrongPassword(t *testing.T) {
	b := setup(t, redistest.WithPassword("right-horse-battery"))
	cfg := b.cfg
	cfg.RedisURL = "redis://:wrong-staple-7@" + b.redis.Addr() + "/0"
	var logs testlog.Buffer
	d, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Shutdown)
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, body := getURL(t, "http://"+d.HTTPAddr()+"/readyz")
	if code != 503 || !strings.Contains(body, "authentication failed") {
		t.Errorf("/readyz with a wrong password: %d %q; want 503 naming an authentication failure", code, body)
	}
	_, metrics := getURL(t, "http://"+d.HTTPAddr()+"/metrics")
	body += metrics
	out := logs.String()
	if !strings.Contains(out, "authentication failed") || strings.Contains(out, "not reachable") {
		t.Errorf("log with a wrong password does not name an authentication failure:\n%s", out)
	}
	if strings.Contains(out+body, "wrong-staple-7") {
		t.Errorf("the password was printed:\n%s\n%s", out, body)
	}
}

// TestRedisTLS: a worker configured with REDLITE_REDIS_CA_FILE, _CERT_FILE and _KEY_FILE
// reaches a redis-server that serves TLS with a CA made in the test and requires client
// certificates, and runs a job (the test's client uses the server's plain port).
func TestRedisTLS(t *testing.T) {
	f := redistest.NewTLSFiles(t)
	b := setup(t, redistest.WithTLS(f))
	cfg := b.cfg
	cfg.RedisURL, cfg.RedisCAFile, cfg.RedisCertFile, cfg.RedisKeyFile = b.redis.TLSURL(0), f.CA, f.ClientCert, f.ClientKey
	d := startDaemon(t, cfg, Observer{})
	waitHTTP(t, "http://"+d.HTTPAddr()+"/readyz", 200)
	job := enqueue(t, b.client, &jobs.Generate{Prompt: "Over TLS", MaxTokens: ptr(4)})
	if _, err := waitResult(t, b.client, job.ID, nil); err != nil {
		t.Fatal(err)
	}
	t.Run("BadSettings", func(t *testing.T) {
		for _, tc := range []struct {
			env  []string
			want string
		}{
			{[]string{"REDLITE_REDIS_URL=" + b.redis.TLSURL(0), "REDLITE_REDIS_CERT_FILE=" + f.ClientCert}, "without its key"},
			{[]string{"REDLITE_REDIS_URL=" + b.redis.URL(0), "REDLITE_REDIS_CA_FILE=" + f.CA}, "not rediss://"},
			{[]string{"REDLITE_REDIS_URL=" + b.redis.TLSURL(0), "REDLITE_REDIS_CA_FILE=/nonexistent/ca.pem"}, "REDLITE_REDIS_CA_FILE"},
		} {
			if _, err := ConfigFromEnv(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want an error naming %q", tc.env, err, tc.want)
			}
		}
	})
}

// TestKill9Restart: a worker killed with SIGKILL mid-job and started again (as launchd or
// Docker restart it) runs the job again at once, rather than after asynq's 60–120 s of
// lease expiry, skew allowance and recoverer period: the restarted worker's orphan finder
// proves the old process gone by its record of running attempts and sends the job to retry
// itself, and the recovered job skips the retry back-off.
func TestKill9Restart(t *testing.T) {
	b := setup(t)
	// A worker's death is not the job's fault: the re-run must not wait out the back-off of
	// a failed attempt.
	b.cfg.RetryDelay = 5 * time.Minute
	p := startDaemonProcess(t, b.cfg)
	// Sampled without a seed: the workers derive it from the job's id, so the re-run writes
	// the same text, and a client streaming it sees the text go on, not start over. (A
	// fixed id keeps the test's text the same from run to run.)
	job := enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(200), Temperature: ptr(0.9)},
		jobs.JobID("kill9-restart-b"))
	type followed struct {
		text string
		res  jobs.Result
		err  error
	}
	streamed := make(chan followed, 1)
	first := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		var text strings.Builder
		res, err := b.client.FollowText(ctx, job.ID, jobs.FollowOptions{OnText: func(d jobs.TextDelta) {
			if text.Len() == 0 {
				close(first)
			}
			text.WriteString(d.Text)
		}}) // no OnReset: a re-run that does not repeat the text fails it
		streamed <- followed{text.String(), res, err}
	}()
	select { // the first piece of text is in the client's hands: the worker is decoding
	case <-first:
	case <-time.After(waitLimit):
		t.Fatal("no text streamed")
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	killed := time.Now()
	b.cfg.WorkerName = "restarted-worker"
	restarted := startDaemonProcess(t, b.cfg)
	res, err := waitResult(t, b.client, job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The stream handed out the killed attempt's text, then only what the re-run wrote
	// beyond it: put together, the result's text, nothing twice.
	if f := <-streamed; f.err != nil || f.text != res.Text {
		t.Errorf("streamed across the kill: %q (%v)\nresult: %q", f.text, f.err, res.Text)
	}
	t.Logf("kill -9 to result of the re-run: %v (includes the restart and the model load)", time.Since(killed).Round(10*time.Millisecond))
	st, _ := b.client.Status(context.Background(), job.ID)
	if res.Worker != "restarted-worker" || res.Usage.CompletionTokens != 200 || st.Retried != 1 || !strings.Contains(st.LastError, "lease expired") {
		t.Errorf("rerun: worker %q, %d tokens, retried %d, last error %q", res.Worker, res.Usage.CompletionTokens, st.Retried, st.LastError)
	}
	// The finder, not asynq's recoverer (which needs the lease expired 30 s ago), sent it.
	sent := regexp.MustCompile(`msg="job orphaned by a dead worker: sent to retry"[^\n]*job=` + regexp.QuoteMeta(job.ID) + `[^\n]*why="its worker process on this host is gone"`)
	if n := len(sent.FindAllString(restarted.out.String(), -1)); n != 1 {
		t.Errorf("the restarted worker sent the job to retry %d times, want once:\n%s", n, restarted.out.String())
	}
}

// TestKill9NoReturn: a worker killed with SIGKILL that never comes back while another worker
// runs. The survivor's orphan finder proves the job orphaned (on another host: its lease
// unextended for 15 s and no live heartbeat listing it) and sends it to asynq's retry set
// itself, without waiting for asynq's recoverer, which runs once a minute (asynq v0.26).
// Asserted: the survivor runs the job again exactly once, as its second attempt, after one
// hand-over. Logged, not asserted (load decides them): the times from the kill to the proof
// and to the job decoding again. REDLITE_TEST_KILL9_TRIALS=20 repeats it and logs the
// minimum, median and maximum (docs/operations.md has the figures).
func TestKill9NoReturn(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out three missed heartbeats per trial")
	}
	trials := 1
	if s := os.Getenv("REDLITE_TEST_KILL9_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("REDLITE_TEST_KILL9_TRIALS=%q: want a count of trials", s)
		}
		trials = n
	}
	b := setup(t)
	// asynq's polling as in production: the re-run waits for its forwarder and dequeue.
	def := DefaultConfig()
	b.cfg.TaskCheckInterval, b.cfg.DelayedTaskCheckInterval = def.TaskCheckInterval, def.DelayedTaskCheckInterval
	// The doomed worker on another host when this machine allows a UTS namespace (root),
	// else on this one, where the finder proves it gone by its PID.
	host := "other-mac"
	if err := exec.Command("unshare", "--uts", "true").Run(); err != nil {
		t.Logf("no UTS namespace (%v): the dead worker runs on this host", err)
		host = ""
	}
	where := "another host"
	if host == "" {
		where = "this host"
	}
	var proven, rerun, sinceBeat []time.Duration
	for i := range trials {
		p, r, h := kill9NoReturn(t, b, host, i)
		proven, rerun, sinceBeat = append(proven, p), append(rerun, r), append(sinceBeat, h)
		t.Logf("trial %d: kill -9 of a worker on %s that never returns: proven orphaned after %v, decoding again on the survivor after %v (%v after its last heartbeat)",
			i+1, where, p.Round(100*time.Millisecond), r.Round(100*time.Millisecond), h.Round(100*time.Millisecond))
	}
	if trials > 1 {
		stats := func(d []time.Duration) string {
			slices.Sort(d)
			return fmt.Sprintf("min %v, median %v, max %v", d[0].Round(100*time.Millisecond), d[len(d)/2].Round(100*time.Millisecond), d[len(d)-1].Round(100*time.Millisecond))
		}
		t.Logf("%d trials, worker on %s: after the kill, proven orphaned %s, decoding again %s; after the last heartbeat, decoding again %s",
			trials, where, stats(proven), stats(rerun), stats(sinceBeat))
	}
}

// kill9NoReturn is one trial of TestKill9NoReturn; it returns the times from the kill to the
// survivor's proof and to the job decoding again, and from the doomed worker's last
// heartbeat to the job decoding again.
func kill9NoReturn(t *testing.T, b *testBundle, host string, trial int) (proven, rerun, sinceBeat time.Duration) {
	cfg := b.cfg
	cfg.WorkerName = fmt.Sprintf("doomed-worker-%d", trial)
	doomed := startDaemonProcessOn(t, cfg, host)
	job := enqueue(t, b.client, longGenerate())
	waitFor(t, b.client, job.ID, "decoding", decoding)

	// The survivor starts once the job runs, so that it cannot take the job first.
	cfg.WorkerName = fmt.Sprintf("survivor-%d", trial)
	survivor := startDaemonProcess(t, cfg)
	up := func() bool {
		servers, err := b.insp.Servers()
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(servers, func(s *asynq.ServerInfo) bool { return s.PID == survivor.cmd.Process.Pid })
	}
	deadline := time.Now().Add(waitLimit)
	for !up() {
		if time.Now().After(deadline) {
			t.Fatal("the survivor's asynq server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, err := b.client.Status(context.Background(), job.ID); err != nil || !decoding(st) {
		t.Fatalf("before the kill: %+v, %v; want the job decoding on the doomed worker", st, err)
	}
	// The doomed worker's last heartbeat extended the job's lease to 30 s after it (asynq
	// keeps whole seconds: ±1 s).
	rdb := redis.NewClient(&redis.Options{Addr: b.redis.Addr()})
	defer rdb.Close()
	lease, err := rdb.ZScore(context.Background(), "asynq:{"+job.Queue+"}:lease", job.ID).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := doomed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	doomed.wait(t)
	killed := time.Now()
	lastBeat := time.Unix(int64(lease), 0).Add(-leaseDuration)

	again := waitFor(t, b.client, job.ID, "decoding again", func(st jobs.Status) bool {
		return decoding(st) && st.Progress.UpdatedAt.After(killed)
	})
	rerun = time.Since(killed)
	sinceBeat = time.Since(lastBeat)
	handover := regexp.MustCompile(`time=(\S+) level=INFO msg="job orphaned by a dead worker[^\n]*job=` + regexp.QuoteMeta(job.ID))
	m := handover.FindAllStringSubmatch(survivor.out.String(), -1)
	if len(m) != 1 {
		t.Fatalf("the survivor handed the job over %d times, want once:\n%s", len(m), survivor.out.String())
	}
	at, err := time.Parse(time.RFC3339Nano, m[0][1])
	if err != nil {
		t.Fatal(err)
	}
	if again.Retried != 1 || !strings.Contains(again.LastError, "lease expired") {
		t.Errorf("rerun: retried %d, last error %q; want one retry after the lease expired", again.Retried, again.LastError)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := b.client.Cancel(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	// The survivor goes, so that the next trial's doomed worker takes its job. Once it has
	// exited, its cancelled attempt has written its partial result and its last log line:
	// asynq moves a cancelled job on without waiting for its handler, so Cancel can return
	// first.
	if err := survivor.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := survivor.wait(t); err != nil {
		t.Fatalf("survivor's exit: %v", err)
	}
	st, err := b.client.Status(context.Background(), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Result == nil || st.Result.Worker != cfg.WorkerName {
		t.Errorf("after the cancel: result %+v; want the survivor's", st.Result)
	}
	ended := regexp.MustCompile(`msg="job ended" job=` + regexp.QuoteMeta(job.ID) + `\S* type=\S+ queue=\S+ attempt=(\d+)`)
	if m := ended.FindAllStringSubmatch(survivor.out.String(), -1); len(m) != 1 || m[0][1] != "2" {
		t.Errorf("the survivor's attempts at the job: %v; want one, the second attempt", m)
	}
	return at.Sub(killed), rerun, sinceBeat
}

// TestFrozenWorker: a worker whose process is frozen (SIGSTOP) long enough to miss three
// heartbeats is taken for dead, and another worker runs its job again; when it wakes
// (SIGCONT), its next write of the old attempt is refused and it exits at once
// (ExitOrphaned), so that the job runs exactly once more, on the other worker, untouched.
func TestFrozenWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out three missed heartbeats")
	}
	b := setup(t)
	b.cfg.WorkerName = "frozen-worker"
	frozen := startDaemonProcess(t, b.cfg)
	job := enqueue(t, b.client, longGenerate())
	waitFor(t, b.client, job.ID, "decoding", decoding)
	b.cfg.WorkerName = "survivor"
	survivor := startDaemonProcess(t, b.cfg)
	waitFor(t, b.client, job.ID, "decoding, with the survivor up", func(st jobs.Status) bool {
		servers, err := b.insp.Servers()
		return err == nil && len(servers) == 2 && decoding(st)
	})
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// Progress written after the freeze is the survivor's (until its first write, the job
	// shows the frozen attempt's last progress).
	again := waitFor(t, b.client, job.ID, "decoding again on the survivor", func(st jobs.Status) bool {
		return decoding(st) && st.Retried == 1 && st.Progress.UpdatedAt.After(stopped)
	})
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := frozen.wait(t); !errors.As(err, &exit) || exit.ExitCode() != ExitOrphaned {
		t.Fatalf("the woken worker: %v, want exit status %d\n%s", err, ExitOrphaned, frozen.out.String())
	}
	if !strings.Contains(frozen.out.String(), "this worker was taken for dead") {
		t.Errorf("the woken worker did not say why it exits:\n%s", frozen.out.String())
	}
	exited := time.Now()
	// The survivor still runs the job, in the same attempt, after the woken worker is gone.
	st := waitFor(t, b.client, job.ID, "progress after the woken worker exited", func(st jobs.Status) bool {
		return st.Progress != nil && st.Progress.UpdatedAt.After(exited)
	})
	if st.State != jobs.StateActive || st.Retried != 1 || st.Progress.Generated < again.Progress.Generated {
		t.Errorf("the re-run after the woken worker exited: %+v; want it still active in its second attempt", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := b.client.Cancel(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	// Once the survivor has exited, its cancelled attempt has written its partial result.
	if err := survivor.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := survivor.wait(t); err != nil {
		t.Fatalf("survivor's exit: %v", err)
	}
	st, err := b.client.Status(context.Background(), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Result == nil || st.Result.Worker != "survivor" {
		t.Errorf("after the cancel: result %+v; want the survivor's", st.Result)
	}
	handover := regexp.MustCompile(`msg="job orphaned by a dead worker: sent to retry"[^\n]*job=` + regexp.QuoteMeta(job.ID))
	if n := len(handover.FindAllString(survivor.out.String(), -1)); n != 1 {
		t.Errorf("the survivor sent the job to retry %d times, want once:\n%s", n, survivor.out.String())
	}
}

// TestWiredLimit checks the Mac's wired-limit check with a stand-in for the sysctl (macOS
// itself cannot run here): the value is exported, shown in /readyz and logged, and a
// planner limit that disagrees with it is warned about.
func TestWiredLimit(t *testing.T) {
	t.Run("Problem", func(t *testing.T) {
		b := func(limit int64) planner.Budget {
			return planner.Budget{LimitMiB: limit, Source: planner.SourceMetal}
		}
		for _, tc := range []struct {
			wired, limit int64
			want         string
		}{
			{21504, 21504, ""},
			{21504, 21000, ""}, // Metal's working set a little below the wired limit
			{0, 16384, "macOS default"},
			{16384, 21504, "above iogpu.wired_limit_mb=16384"},
			{21504, 16384, "well below iogpu.wired_limit_mb=21504"},
		} {
			got := wiredLimitProblem(tc.wired, b(tc.limit))
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("wired %d, limit %d: %q, want %q", tc.wired, tc.limit, got, tc.want)
			}
		}
	})
	t.Run("Daemon", func(t *testing.T) {
		prev := readWiredLimit
		readWiredLimit = func() (int64, bool, error) { return 21504, true, nil }
		t.Cleanup(func() { readWiredLimit = prev })
		b := setup(t)
		var logs testlog.Buffer
		d, err := New(b.cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registry: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Shutdown)
		if err := d.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		base := "http://" + d.HTTPAddr()
		waitHTTP(t, base+"/readyz", 200)
		if _, body := getURL(t, base+"/readyz"); !strings.Contains(body, "iogpu.wired_limit_mb: 21504; planner limit: 4096 MiB") || !strings.Contains(body, "warning: ") {
			t.Errorf("/readyz: %q", body)
		}
		if _, body := getURL(t, base+"/metrics"); !strings.Contains(body, "redlite_iogpu_wired_limit_bytes 2.2548578304e+10") {
			t.Error("/metrics lacks redlite_iogpu_wired_limit_bytes")
		}
		if !strings.Contains(logs.String(), "level=WARN msg=\"the planner's limit 4096 MiB") {
			t.Errorf("no warning in the log:\n%s", logs.String())
		}
	})
}
