package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/internal/redisx"
)

// waitLimit bounds every wait for an event in these tests; a healthy run takes milliseconds.
const waitLimit = 20 * time.Second

type testBundle struct {
	redis *redistest.Server
	url   string
}

func setup(t *testing.T) (*Client, *testBundle) {
	t.Helper()
	srv := redistest.Start(t)
	c, err := NewClient(srv.URL(0), WithPollInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, &testBundle{redis: srv, url: srv.URL(0)}
}

// worker is an asynq server with a handler written per test. It stands in for no part of
// the daemon: it exists to drive the client through the states a real worker produces.
type worker struct {
	srv *asynq.Server
}

func startWorker(t *testing.T, b *testBundle, h func(ctx context.Context, task *asynq.Task) error) *worker {
	t.Helper()
	u, err := redisx.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	srv := asynq.NewServer(u.AsynqOpt(), asynq.Config{
		Concurrency:       1,
		Queues:            QueueWeights(),
		TaskCheckInterval: 10 * time.Millisecond,
		LogLevel:          asynq.ErrorLevel,
		ShutdownTimeout:   5 * time.Second,
		// A retried attempt must not start again while a test inspects the retry state.
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Hour },
	})
	if err := srv.Start(asynq.HandlerFunc(h)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return &worker{srv: srv}
}

// eventually polls cond until it holds or waitLimit passes.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		<-tick.C
	}
	t.Fatalf("timed out after %v waiting for %s; last seen: %s", waitLimit, what, last)
}

func waitState(t *testing.T, c *Client, id string, want State) Status {
	t.Helper()
	var st Status
	eventually(t, fmt.Sprintf("job %s to be %s", id, want), func() (bool, string) {
		var err error
		st, err = c.Status(context.Background(), id)
		return err == nil && st.State == want, fmt.Sprintf("%+v %v", st, err)
	})
	return st
}

func sampleResult(text string, meta json.RawMessage) Result {
	return Result{
		Text: text, FinishReason: FinishStop,
		Usage:   Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10},
		Timings: Timings{QueueWaitMS: 1, PrefillMS: 2, PrefillTokensPerSecond: 3500, DecodeMS: 4, DecodeTokensPerSecond: 750, TotalMS: 6},
		Plan:    Plan{Context: 4096, Chunk: 512, KVPrecision: "f16", ExpertResidency: "full", Slots: 1, NeedMiB: 100, LimitMiB: 200},
		Model:   "test-model", Worker: "test-worker", Metadata: meta,
	}
}

func TestClientRoundTrip(t *testing.T) {
	ctx := context.Background()
	c, b := setup(t)

	job, err := c.Enqueue(ctx, &Generate{
		Messages:  []Message{{Role: RoleUser, Content: "Hello"}},
		MaxTokens: ptr(8),
		Common:    Common{Priority: PriorityHigh, Metadata: json.RawMessage(`{"order":17}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if job.Queue != QueueCritical || job.Type != TypeGenerate || job.ID == "" {
		t.Fatalf("job = %+v", job)
	}

	t.Run("PendingBeforeAWorker", func(t *testing.T) {
		st, err := c.Status(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != StatePending || st.Progress != nil || st.Result != nil {
			t.Errorf("status = %+v", st)
		}
		if st.MaxRetry != DefaultMaxRetry || st.Timeout != DefaultTimeout || st.Retention != DefaultRetention || !st.Deadline.IsZero() {
			t.Errorf("options: max retry %d, timeout %v, retention %v, deadline %v", st.MaxRetry, st.Timeout, st.Retention, st.Deadline)
		}
		if _, err := c.Result(ctx, job.ID); !errors.Is(err, ErrNotDone) {
			t.Errorf("Result of a pending job: %v, want ErrNotDone", err)
		}
	})

	// Wait from before the job starts, to see every phase.
	type waited struct {
		res Result
		err error
	}
	var (
		mu     sync.Mutex
		phases []Phase
	)
	waitDone := make(chan waited, 1)
	go func() {
		res, err := c.Wait(ctx, job.ID, func(p Progress) {
			mu.Lock()
			phases = append(phases, p.Phase)
			mu.Unlock()
		})
		waitDone <- waited{res, err}
	}()
	eventually(t, "Wait to report queued", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(phases) > 0, fmt.Sprint(phases)
	})

	release := make(chan struct{})
	writeErrs := make(chan error, 3)
	startWorker(t, b, func(ctx context.Context, task *asynq.Task) error {
		g, err := DecodeGenerate(task.Payload())
		if err != nil {
			return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
		}
		rw := task.ResultWriter()
		_, err1 := rw.Write(EncodeProgress(Progress{Phase: PhaseTokenizing, MaxTokens: 8, UpdatedAt: time.Now()}))
		_, err2 := rw.Write(EncodeProgress(Progress{Phase: PhasePrefill, PromptTokens: 7, Prefilled: 4, MaxTokens: 8, UpdatedAt: time.Now()}))
		writeErrs <- errors.Join(err1, err2)
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		env, err := EncodeResult(sampleResult("Hi there", g.Metadata))
		if err != nil {
			return err
		}
		_, err = rw.Write(env)
		writeErrs <- err
		return err
	})

	t.Run("ProgressVisibleWhileActive", func(t *testing.T) {
		// asynq's ResultWriter.Write is a plain HSET of the task hash's "result" field: it
		// can be called many times, and GetTaskInfo returns the latest while the task runs.
		if err := <-writeErrs; err != nil {
			t.Fatalf("writing progress: %v", err)
		}
		st := waitState(t, c, job.ID, StateActive)
		if st.Progress == nil || st.Progress.Phase != PhasePrefill || st.Progress.Prefilled != 4 || st.Progress.PromptTokens != 7 {
			t.Fatalf("progress while active = %+v", st.Progress)
		}
		eventually(t, "Wait to report prefill", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return len(phases) > 0 && phases[len(phases)-1] == PhasePrefill, fmt.Sprint(phases)
		})
	})

	close(release)
	var w waited
	select {
	case w = <-waitDone:
	case <-time.After(waitLimit):
		t.Fatal("Wait did not return")
	}
	if w.err != nil {
		t.Fatalf("Wait: %v", w.err)
	}
	want := sampleResult("Hi there", json.RawMessage(`{"order":17}`))
	want.Version = Version
	if w.res.Text != want.Text || w.res.Usage != want.Usage || w.res.Timings != want.Timings || w.res.Plan != want.Plan ||
		w.res.Version != 1 || w.res.Model != want.Model || w.res.Worker != want.Worker || string(w.res.Metadata) != `{"order":17}` {
		t.Errorf("result = %+v\nwant %+v", w.res, want)
	}
	mu.Lock()
	if phases[0] != PhaseQueued || !containsPhase(phases, PhasePrefill) {
		t.Errorf("progress phases seen by Wait = %v, want queued first, then prefill", phases)
	}
	mu.Unlock()

	t.Run("CompletedStatusAndResult", func(t *testing.T) {
		st := waitState(t, c, job.ID, StateCompleted)
		if st.CompletedAt.IsZero() || st.Result == nil || st.Progress != nil {
			t.Errorf("status = %+v", st)
		}
		r, err := c.Result(ctx, job.ID)
		if err != nil || r.Text != "Hi there" {
			t.Errorf("Result = %+v, %v", r, err)
		}
	})
	t.Run("CancelCompleted", func(t *testing.T) {
		if err := c.Cancel(ctx, job.ID); !errors.Is(err, ErrFinished) {
			t.Errorf("Cancel of a completed job: %v, want ErrFinished", err)
		}
	})
}

func containsPhase(ps []Phase, p Phase) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

func TestEnqueueOptions(t *testing.T) {
	ctx := context.Background()
	c, _ := setup(t)

	t.Run("TimeoutAndDeadline", func(t *testing.T) {
		deadline := time.Now().Add(time.Hour).Truncate(time.Second)
		job, err := c.Enqueue(ctx, &Summarize{Input: "doc", Common: Common{Timeout: 90, Deadline: &deadline, Priority: PriorityLow}},
			MaxRetry(1), Retention(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Status(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Queue != QueueLow || st.Type != TypeSummarize || st.Timeout != 90*time.Second || !st.Deadline.Equal(deadline) ||
			st.MaxRetry != 1 || st.Retention != time.Minute {
			t.Errorf("status = %+v", st)
		}
	})
	t.Run("DeadlineOnly", func(t *testing.T) {
		deadline := time.Now().Add(time.Hour).Truncate(time.Second)
		job, err := c.Enqueue(ctx, &Summarize{Input: "doc", Common: Common{Deadline: &deadline}})
		if err != nil {
			t.Fatal(err)
		}
		st, _ := c.Status(ctx, job.ID)
		if st.Timeout != 0 || !st.Deadline.Equal(deadline) || st.Queue != QueueDefault {
			t.Errorf("timeout %v deadline %v queue %s; want no timeout, the deadline, queue default", st.Timeout, st.Deadline, st.Queue)
		}
	})
	t.Run("DeadlineInThePast", func(t *testing.T) {
		past := time.Now().Add(-time.Minute)
		_, err := c.Enqueue(ctx, &Summarize{Input: "doc", Common: Common{Deadline: &past}})
		if !errors.Is(err, ErrBadPayload) || !strings.HasPrefix(err.Error(), "deadline: is not in the future") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("InvalidPayloadIsNotEnqueued", func(t *testing.T) {
		_, err := c.Enqueue(ctx, &Generate{Prompt: "x", MaxTokens: ptr(0), Common: Common{IdempotencyKey: "never"}})
		assertValidation(t, err, "max_tokens: must be between 1 and 32768, got 0")
		if _, err := c.Status(ctx, "never"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Status of a refused job: %v, want ErrNotFound", err)
		}
	})
	t.Run("BadRetention", func(t *testing.T) {
		if _, err := c.Enqueue(ctx, &Summarize{Input: "doc"}, Retention(0)); err == nil || !strings.Contains(err.Error(), "retention must be at least 1s") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestIdempotency(t *testing.T) {
	ctx := context.Background()
	c, _ := setup(t)
	p := &Summarize{Input: "doc", Common: Common{IdempotencyKey: "report-2025-03:v1"}}
	first, err := c.Enqueue(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != "report-2025-03:v1" {
		t.Fatalf("job id = %q, want the idempotency key", first.ID)
	}
	t.Run("SameQueue", func(t *testing.T) {
		dup, err := c.Enqueue(ctx, p)
		if !errors.Is(err, ErrDuplicate) {
			t.Fatalf("err = %v, want ErrDuplicate", err)
		}
		if dup != first {
			t.Errorf("duplicate returned %+v, want the existing %+v", dup, first)
		}
		if !strings.Contains(err.Error(), "job report-2025-03:v1 exists") {
			t.Errorf("error does not name the job: %v", err)
		}
	})
	t.Run("OtherPriority", func(t *testing.T) {
		high := *p
		high.Priority = PriorityHigh
		dup, err := c.Enqueue(ctx, &high)
		if !errors.Is(err, ErrDuplicate) || dup.Queue != QueueDefault {
			t.Fatalf("got %+v, %v; want ErrDuplicate naming the job in queue default", dup, err)
		}
	})
	t.Run("Conflict", func(t *testing.T) {
		// A job enqueued behind the client's back (another client racing) hits asynq's own
		// per-queue check.
		raw := asynq.NewClientFromRedisClient(c.rdb)
		if _, err := raw.Enqueue(asynq.NewTask(TypeSummarize, []byte(`{}`)), asynq.TaskID("raced"), asynq.Queue(QueueLow)); err != nil {
			t.Fatal(err)
		}
		dup, err := c.Enqueue(ctx, &Summarize{Input: "doc", Common: Common{IdempotencyKey: "raced", Priority: PriorityLow}})
		if !errors.Is(err, ErrDuplicate) || dup.ID != "raced" || dup.Queue != QueueLow {
			t.Errorf("got %+v, %v", dup, err)
		}
	})
}

func TestCancel(t *testing.T) {
	ctx := context.Background()

	t.Run("Pending", func(t *testing.T) {
		c, _ := setup(t)
		job, err := c.Enqueue(ctx, &Summarize{Input: "doc", Common: Common{Metadata: json.RawMessage(`{"x":1}`)}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Cancel(ctx, job.ID); err != nil {
			t.Fatal(err)
		}
		st, err := c.Status(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != StateArchived || st.Result == nil || st.Result.FinishReason != FinishCancelled || string(st.Result.Metadata) != `{"x":1}` {
			t.Errorf("status after cancel = %+v, result %+v", st, st.Result)
		}
		res, err := c.Wait(ctx, job.ID, nil)
		if !errors.Is(err, ErrCancelled) || !errors.Is(err, ErrFailed) || res.FinishReason != FinishCancelled {
			t.Errorf("Wait = %+v, %v; want a cancelled result and ErrCancelled", res, err)
		}
		if err := c.Cancel(ctx, job.ID); !errors.Is(err, ErrFinished) {
			t.Errorf("second Cancel: %v, want ErrFinished", err)
		}
	})

	t.Run("Active", func(t *testing.T) {
		c, b := setup(t)
		job, err := c.Enqueue(ctx, &Generate{Prompt: "Once", Common: Common{IdempotencyKey: "long-one"}})
		if err != nil {
			t.Fatal(err)
		}
		type handlerReport struct{ writerErr, envelopeErr error }
		started := make(chan struct{})
		finished := make(chan handlerReport, 1)
		startWorker(t, b, func(hctx context.Context, task *asynq.Task) error {
			rw := task.ResultWriter()
			if _, err := rw.Write(EncodeProgress(Progress{Phase: PhaseDecode, Generated: 2, UpdatedAt: time.Now()})); err != nil {
				return err
			}
			close(started)
			<-hctx.Done()
			partial := sampleResult("Once upon", nil)
			partial.FinishReason = FinishCancelled
			env, err := EncodeResult(partial)
			if err != nil {
				return err
			}
			// asynq's ResultWriter refuses once the task context is done; the worker
			// records its partial result through WriteEnvelope instead.
			_, werr := rw.Write(env)
			queue, _ := asynq.GetQueueName(hctx)
			eerr := c.WriteEnvelope(context.Background(), queue, rw.TaskID(), env)
			finished <- handlerReport{werr, eerr}
			return hctx.Err()
		})
		select {
		case <-started:
		case <-time.After(waitLimit):
			t.Fatal("handler did not start")
		}
		cctx, cancel := context.WithTimeout(ctx, waitLimit)
		defer cancel()
		if err := c.Cancel(cctx, job.ID); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		var rep handlerReport
		select {
		case rep = <-finished:
		case <-time.After(waitLimit):
			t.Fatal("handler did not see the cancel")
		}
		if rep.writerErr == nil || !strings.Contains(rep.writerErr.Error(), "context canceled") {
			t.Errorf("ResultWriter.Write after cancel: %v, want a context canceled error", rep.writerErr)
		}
		if rep.envelopeErr != nil {
			t.Fatalf("WriteEnvelope: %v", rep.envelopeErr)
		}
		st, err := c.Status(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != StateArchived || !strings.Contains(st.LastError, "context canceled") {
			t.Errorf("state %s, last error %q; want archived after context canceled", st.State, st.LastError)
		}
		if st.Result == nil || st.Result.FinishReason != FinishCancelled || st.Result.Text != "Once upon" {
			t.Errorf("result = %+v, want the worker's partial text, cancelled", st.Result)
		}
		res, err := c.Wait(ctx, job.ID, nil)
		if !errors.Is(err, ErrCancelled) || res.Text != "Once upon" {
			t.Errorf("Wait = %+v, %v", res, err)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		c, _ := setup(t)
		if err := c.Cancel(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("err = %v, want ErrNotFound", err)
		}
	})
}

func TestFailedJob(t *testing.T) {
	ctx := context.Background()
	c, b := setup(t)
	job, err := c.Enqueue(ctx, &Generate{Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, b, func(ctx context.Context, task *asynq.Task) error {
		return fmt.Errorf("model: wants %q, worker has %q: %w", "big", "small", asynq.SkipRetry)
	})
	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	_, err = c.Wait(wctx, job.ID, nil)
	var je *JobError
	if !errors.As(err, &je) || !errors.Is(err, ErrFailed) || errors.Is(err, ErrCancelled) {
		t.Fatalf("Wait: %v, want a *JobError matching ErrFailed only", err)
	}
	if je.State != StateArchived || !strings.Contains(je.LastError, `model: wants "big"`) {
		t.Errorf("JobError = %+v", je)
	}
}

func TestStatusErrors(t *testing.T) {
	ctx := context.Background()
	c, b := setup(t)
	if _, err := c.Status(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Status(missing): %v", err)
	}
	if _, err := c.Status(ctx, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Status(\"\"): %v", err)
	}
	t.Run("WaitHonoursContext", func(t *testing.T) {
		job, err := c.Enqueue(ctx, &Generate{Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		calls := 0
		_, err = c.Wait(wctx, job.ID, func(Progress) { calls++; cancel() })
		if !errors.Is(err, context.Canceled) || calls != 1 {
			t.Errorf("Wait: %v after %d progress calls, want context.Canceled after 1", err, calls)
		}
	})
	t.Run("ForeignResult", func(t *testing.T) {
		job, err := c.Enqueue(ctx, &Generate{Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteEnvelope(ctx, job.Queue, job.ID, []byte(`not json`)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Status(ctx, job.ID); err == nil || !strings.Contains(err.Error(), "decode job envelope") {
			t.Errorf("Status with a foreign result: %v", err)
		}
	})
	t.Run("WriteEnvelopeMissing", func(t *testing.T) {
		if err := c.WriteEnvelope(ctx, QueueDefault, "gone", EncodeProgress(Progress{})); !errors.Is(err, ErrNotFound) {
			t.Errorf("WriteEnvelope to a missing job: %v", err)
		}
	})
	t.Run("RedisDown", func(t *testing.T) {
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		b.redis.Stop()
		if err := c.Ping(ctx); err == nil {
			t.Error("Ping succeeded with Redis stopped")
		}
		if _, err := c.Status(ctx, "x"); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Status with Redis stopped: %v, want a connection error, not ErrNotFound", err)
		}
	})
}

func TestNewClient(t *testing.T) {
	if _, err := NewClient("http://localhost"); err == nil || !strings.Contains(err.Error(), "scheme must be redis, rediss") {
		t.Errorf("bad URL: %v", err)
	}
	if _, err := NewClient("redis://localhost:1", WithRetention(time.Millisecond)); err == nil {
		t.Error("sub-second retention accepted")
	}
	if _, err := NewClient("redis://localhost:1", WithMaxRetry(-1)); err == nil {
		t.Error("negative max retry accepted")
	}
}

// TestTimeoutIsRetriedByAsynq pins down what asynq v0.26 does when a job's timeout passes,
// which README.md tells worker authors: the attempt counts as failed with "context deadline
// exceeded" and goes to retry (not archive), and ResultWriter refuses to write from then on.
func TestTimeoutIsRetriedByAsynq(t *testing.T) {
	ctx := context.Background()
	c, b := setup(t)
	job, err := c.Enqueue(ctx, &Generate{Prompt: "x", Common: Common{Timeout: 1}})
	if err != nil {
		t.Fatal(err)
	}
	writeErr := make(chan error, 1)
	startWorker(t, b, func(hctx context.Context, task *asynq.Task) error {
		<-hctx.Done()
		_, err := task.ResultWriter().Write(EncodeProgress(Progress{Phase: PhaseDone}))
		writeErr <- err
		return hctx.Err()
	})
	st := waitState(t, c, job.ID, StateRetry)
	if !strings.Contains(st.LastError, "context deadline exceeded") || st.Retried != 1 {
		t.Errorf("after the timeout: last error %q, retried %d", st.LastError, st.Retried)
	}
	select {
	case err := <-writeErr:
		if err == nil {
			t.Error("ResultWriter.Write succeeded after the timeout")
		}
	case <-time.After(waitLimit):
		t.Fatal("handler did not return")
	}
}
