package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/tokenizer"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/planner"
)

// checkResult checks every field a result must carry.
func checkResult(t *testing.T, res jobs.Result, maxTokens int, wantMeta string) {
	t.Helper()
	if res.Version != jobs.Version {
		t.Errorf("version %d", res.Version)
	}
	switch res.FinishReason {
	case jobs.FinishStop, jobs.FinishLength:
	default:
		t.Errorf("finish_reason %q", res.FinishReason)
	}
	u := res.Usage
	if u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.CompletionTokens > maxTokens || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v (max_tokens %d)", u, maxTokens)
	}
	if res.FinishReason == jobs.FinishLength && u.CompletionTokens != maxTokens {
		t.Errorf("finish_reason length after %d of %d tokens", u.CompletionTokens, maxTokens)
	}
	if res.Text == "" {
		t.Error("empty text")
	}
	tm := res.Timings
	if tm.PrefillMS <= 0 || tm.PrefillTokensPerSecond <= 0 || tm.DecodeMS <= 0 || tm.DecodeTokensPerSecond <= 0 ||
		tm.TotalMS < tm.PrefillMS+tm.DecodeMS || tm.QueueWaitMS < 0 {
		t.Errorf("timings %+v", tm)
	}
	p := res.Plan
	if p.Context != u.PromptTokens+maxTokens || p.Chunk != 512 || p.KVPrecision != "f32" || p.ExpertResidency != "full" ||
		p.Slots != 1 || p.NeedMiB <= 0 || p.NeedMiB > p.LimitMiB || p.LimitMiB != 4096 || p.MTP || p.Backend != "cpu" {
		t.Errorf("plan %+v (prompt %d + max_tokens %d)", p, u.PromptTokens, maxTokens)
	}
	if res.Model != "tiny-qwen3-Q8_0" && res.Model == "" {
		t.Errorf("model %q", res.Model)
	}
	if res.Worker != "test-worker" {
		t.Errorf("worker %q", res.Worker)
	}
	if string(res.Metadata) != wantMeta {
		t.Errorf("metadata %s, want %s", res.Metadata, wantMeta)
	}
}

func TestJobs(t *testing.T) {
	b := setup(t)
	allowLoopback(t, b) // the Webhook subtest's receiver
	startDaemon(t, b.cfg, Observer{})

	t.Run("Summarize", func(t *testing.T) {
		job := enqueue(t, b.client, &jobs.Summarize{
			Input:        "The committee met on 4 March. It approved the budget of 1.2 million and postponed the vote on the new building to April.",
			Instructions: &jobs.Instructions{Style: jobs.StyleBullets, Focus: "decisions"},
			MaxTokens:    ptr(24),
			Common:       jobs.Common{Metadata: json.RawMessage(`{"doc":"minutes"}`)},
		})
		res, err := waitResult(t, b.client, job.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, res, 24, `{"doc":"minutes"}`)
	})

	t.Run("GenerateMessagesWithProgress", func(t *testing.T) {
		job := enqueue(t, b.client, &jobs.Generate{
			Messages:    []jobs.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Tell me a story."}},
			MaxTokens:   ptr(600),
			Temperature: ptr(0.7),
			Seed:        ptr(int64(7)),
			Common:      jobs.Common{Priority: jobs.PriorityHigh},
		})
		var mu sync.Mutex
		var seen []jobs.Progress
		res, err := waitResult(t, b.client, job.ID, func(p jobs.Progress) {
			mu.Lock()
			seen = append(seen, p)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, res, 600, "")
		mu.Lock()
		defer mu.Unlock()
		running := false
		for _, p := range seen {
			if p.Phase == jobs.PhaseDecode && p.Generated > 0 && p.PromptTokens == res.Usage.PromptTokens && p.MaxTokens == 600 {
				running = true
			}
		}
		if !running {
			t.Errorf("no decode progress seen while the job ran: %+v", seen)
		}
		// The progress carries the text so far: always a prefix of the result's (the 600
		// tokens fit the 64 KiB bound), growing while the job runs.
		texts := map[string]bool{}
		for _, p := range seen {
			if p.TextOffset != 0 || !strings.HasPrefix(res.Text, p.Text) {
				t.Fatalf("progress text at offset %d, %q, is not a prefix of the result %q", p.TextOffset, p.Text, res.Text)
			}
			if p.Text != "" {
				texts[p.Text] = true
			}
		}
		if len(texts) < 2 {
			t.Errorf("the progress showed %d distinct texts while 600 tokens were generated, want at least 2", len(texts))
		}
	})

	t.Run("GenerateRawPromptAndStop", func(t *testing.T) {
		job := enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(40), Temperature: ptr(0.0)})
		first, err := waitResult(t, b.client, job.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, first, 40, "")
		// Greedy output is reproducible; stopping at a piece of it ends the text before it.
		cut := strings.TrimSpace(first.Text[len(first.Text)/2:])
		if len(cut) < 2 {
			t.Skipf("greedy text %q too short to pick a stop string", first.Text)
		}
		stop := cut[:2]
		job = enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(40), Temperature: ptr(0.0), Stop: []string{stop}})
		res, err := waitResult(t, b.client, job.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, _, _ := strings.Cut(first.Text, stop)
		if res.FinishReason != jobs.FinishStop || res.Text != want {
			t.Errorf("with stop %q: %q (%s), want %q", stop, res.Text, res.FinishReason, want)
		}
	})

	t.Run("ChoicesShareThePrompt", func(t *testing.T) {
		one := enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(16), Temperature: ptr(1.0), Seed: ptr(int64(5))})
		alone, err := waitResult(t, b.client, one.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		job := enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(16), Temperature: ptr(1.0), Seed: ptr(int64(5)),
			N: ptr(3), Logprobs: ptr(true)})
		res, err := waitResult(t, b.client, job.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Choices) != 3 {
			t.Fatalf("%d choices, want 3: %+v", len(res.Choices), res)
		}
		sum := 0
		for i, c := range res.Choices {
			sum += c.CompletionTokens
			if c.Index != i || c.Text == "" || c.Logprobs == nil || len(c.Logprobs.Content) != c.CompletionTokens && c.FinishReason == jobs.FinishLength {
				t.Errorf("choice %d: %+v", i, c)
			}
		}
		// The first choice is the job without n, with the same seed; the others differ.
		if c := res.Choices[0]; c.Text != alone.Text || res.Text != c.Text || res.FinishReason != c.FinishReason {
			t.Errorf("choice 0 %q (result text %q), the job alone %q", c.Text, res.Text, alone.Text)
		}
		if res.Choices[1].Text == res.Choices[0].Text || res.Choices[2].Text == res.Choices[1].Text {
			t.Errorf("sampled choices are alike: %+v", res.Choices)
		}
		if u := res.Usage; u.PromptTokens != alone.Usage.PromptTokens || u.CompletionTokens != sum || u.TotalTokens != u.PromptTokens+sum {
			t.Errorf("usage %+v, want the prompt's %d tokens once and %d completion tokens", u, alone.Usage.PromptTokens, sum)
		}
	})

	t.Run("Webhook", func(t *testing.T) {
		got := make(chan []byte, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if r.Method == http.MethodPost && r.Header.Get("Content-Type") == "application/json" && r.Header.Get("Redlite-Job-Id") == "hook-1" {
				got <- b
			}
		}))
		defer srv.Close()
		enqueue(t, b.client, &jobs.Generate{Prompt: "hook", MaxTokens: ptr(3), Common: jobs.Common{IdempotencyKey: "hook-1", WebhookURL: srv.URL + "/done"}})
		select {
		case body := <-got:
			env, err := jobs.DecodeEnvelope(body)
			if err != nil || env.Result == nil || env.Result.Usage.CompletionTokens != 3 {
				t.Errorf("webhook body %s: %v", body, err)
			}
		case <-time.After(waitLimit):
			t.Fatal("no webhook POST")
		}
	})

	t.Run("QueueWaitFromHeader", func(t *testing.T) {
		c := asynq.NewClient(mustRedisOpt(t, b.cfg.RedisURL))
		defer c.Close()
		at := time.Now().Add(-2 * time.Second)
		task := asynq.NewTaskWithHeaders(jobs.TypeGenerate, []byte(`{"version":1,"prompt":"x","max_tokens":2}`),
			map[string]string{jobs.HeaderEnqueuedAt: strconv.FormatInt(at.UnixNano(), 10)})
		info, err := c.Enqueue(task, asynq.Queue(jobs.QueueDefault), asynq.Retention(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		res, err := waitResult(t, b.client, info.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if w := res.Timings.QueueWaitMS; w < 2000 || w > 2000+float64(waitLimit.Milliseconds()) {
			t.Errorf("queue_wait_ms %v for a job enqueued 2 s before it was sent", w)
		}
	})

	t.Run("InvalidPayloadArchived", func(t *testing.T) {
		c := asynq.NewClient(mustRedisOpt(t, b.cfg.RedisURL))
		defer c.Close()
		for _, tc := range []struct {
			typ, payload, want string
		}{
			{jobs.TypeSummarize, `{"version":1,"input":"x","max_tokens":0}`, "max_tokens: must be between 1 and 32768, got 0"},
			{jobs.TypeGenerate, `{"version":1,"prompt":"x","colour":"red"}`, "colour: unknown field"},
			{"translate", `{"version":1}`, "type: must be summarize or generate"},
			{jobs.TypeGenerate, `{"version":1,"prompt":"x","model":"qwen3-235b"}`, `model: no live worker serves "qwen3-235b" (served: tiny-qwen3)`},
		} {
			info, err := c.Enqueue(asynq.NewTask(tc.typ, []byte(tc.payload)), asynq.Queue(jobs.QueueDefault), asynq.MaxRetry(3))
			if err != nil {
				t.Fatal(err)
			}
			st := waitFor(t, b.client, info.ID, "archive", func(st jobs.Status) bool { return st.State == jobs.StateArchived })
			if !strings.Contains(st.LastError, tc.want) || st.Retried != 0 {
				t.Errorf("%s %s: archived after %d retries with %q, want it to contain %q", tc.typ, tc.payload, st.Retried, st.LastError, tc.want)
			}
		}
	})

	t.Run("CancelMidPrefill", func(t *testing.T) {
		// A fresh daemon whose observer cancels the job after its first prefill pass and
		// holds the engine until the cancellation has reached the job's context: whatever the
		// timing, the engine may then run no further pass. The plan's chunk (2048) holds the
		// whole prompt: the engine must still stop within one pass of prefillCancelTokens.
		b := setup(t)
		b.cfg.MaxChunk = 0
		// asynq sends a cancelled job to retry before Cancel archives it: a long back-off
		// keeps a second attempt (whose passes the observer would count) from starting.
		b.cfg.RetryDelay = time.Minute
		var (
			mu     sync.Mutex
			chunks []int
		)
		cancelled := make(chan error, 1)
		startDaemon(t, b.cfg, Observer{PrefillChunk: func(ctx context.Context, id string, done, total int) {
			mu.Lock()
			chunks = append(chunks, done)
			first := len(chunks) == 1
			mu.Unlock()
			if !first {
				return
			}
			go func() {
				cctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				defer cancel()
				cancelled <- b.client.Cancel(cctx, id)
			}()
			select {
			case <-ctx.Done():
			case <-time.After(waitLimit):
				t.Error("the job's context was not cancelled")
			}
		}})
		prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 50) // 1,451 tokens: 1 chunk, 3 passes
		job := enqueue(t, b.client, &jobs.Generate{Prompt: prompt, MaxTokens: ptr(8), Common: jobs.Common{Metadata: json.RawMessage(`{"k":1}`)}})
		if err := <-cancelled; err != nil {
			t.Fatal(err)
		}
		// Cancel archives the job as soon as asynq lets it go, with a placeholder result if
		// the worker has not yet written its partial one, which replaces it a moment later.
		waitFor(t, b.client, job.ID, "the worker's partial result", func(st jobs.Status) bool {
			return st.Result != nil && st.Result.Worker != ""
		})
		res, err := b.client.Result(context.Background(), job.ID)
		if !errors.Is(err, jobs.ErrCancelled) {
			t.Fatalf("result error %v, want ErrCancelled", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(chunks) != 1 || chunks[0] != 512 {
			t.Errorf("prefill passes run: %v, want only the first of 512 tokens", chunks)
		}
		if res.Plan.Chunk != 2048 {
			t.Errorf("plan chunk %d, want 2048 (the test needs a chunk above prefillCancelTokens)", res.Plan.Chunk)
		}
		// The tokens actually prefilled, not the prompt's 1,451.
		if res.FinishReason != jobs.FinishCancelled || res.Usage.CompletionTokens != 0 || res.Usage.PromptTokens != 512 ||
			string(res.Metadata) != `{"k":1}` || res.Worker != "test-worker" {
			t.Errorf("cancelled result %+v", res)
		}
	})

	t.Run("DeadlinePasses", func(t *testing.T) {
		g := longGenerate()
		g.Deadline = ptr(time.Now().Add(3 * time.Second).Truncate(time.Second))
		job := enqueue(t, b.client, g)
		waitFor(t, b.client, job.ID, "decoding", decoding)
		// asynq fails the attempt the moment the deadline passes; the worker archives the
		// job at once (before the fix it went back to retry until its 3 retries were spent).
		st := waitFor(t, b.client, job.ID, "archived after the deadline", func(st jobs.Status) bool {
			return st.State == jobs.StateArchived && st.Result != nil
		})
		if st.Retried > 1 {
			t.Errorf("retried %d times after its deadline, want no further attempt", st.Retried)
		}
		if !strings.Contains(st.LastError, "deadline") {
			t.Errorf("last error %q", st.LastError)
		}
		r := st.Result
		if r == nil || r.FinishReason != jobs.FinishCancelled || r.Usage.CompletionTokens == 0 || r.Usage.CompletionTokens >= jobs.MaxMaxTokens {
			t.Errorf("result after the deadline: %+v", r)
		}
	})

	t.Run("PanicIsRetriedEngineFault", func(t *testing.T) {
		b := setup(t)
		var once sync.Once
		startDaemon(t, b.cfg, Observer{PrefillChunk: func(context.Context, string, int, int) {
			once.Do(func() { panic("boom") })
		}})
		job := enqueue(t, b.client, &jobs.Generate{Prompt: "hello", MaxTokens: ptr(4)})
		res, err := waitResult(t, b.client, job.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, err := b.client.Status(context.Background(), job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Retried != 1 || !strings.Contains(st.LastError, "engine fault: panic: boom") || res.Usage.CompletionTokens == 0 {
			t.Errorf("after a panic: retried %d, last error %q, result %+v", st.Retried, st.LastError, res)
		}
	})
}

func mustRedisOpt(t *testing.T, url string) asynq.RedisConnOpt {
	t.Helper()
	u, err := redisx.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	return u.AsynqOpt()
}

// TestPlanning is issue 4's end-to-end check: the daemon plans every job against its limit.
func TestPlanning(t *testing.T) {
	b := setup(t)
	lm, err := loadModel(b.model, "", engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.close()
	// The limit at which a job of a 1,451-token prompt and 50 output tokens fits only with
	// f16 KV: the f16 plan's need.
	const maxTokens = 50
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 50)
	promptTokens := len(lm.tok.Encode(prompt, false))
	need := func(kv ml.DType, limit int64) (int64, error) {
		p, err := planner.Choose(planner.Job{PromptTokens: promptTokens, MaxTokens: maxTokens, Policy: planner.Policy{KV: planner.ForceKV(kv), MaxChunk: 512}},
			lm.profile, planner.CPUPlaceholder(), planner.Budget{LimitMiB: limit, Source: planner.SourceOverride})
		return p.NeedMiB, err
	}
	limit, err := need(ml.F16, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if f32, _ := need(ml.F32, 1<<20); f32 <= limit {
		t.Fatalf("f32 needs %d MiB, f16 %d MiB: no limit separates them", f32, limit)
	}
	cfg := b.cfg
	cfg.GPULimitMiB = limit
	startDaemon(t, cfg, Observer{})

	t.Run("FitsOnlyWithF16", func(t *testing.T) {
		job := enqueue(t, b.client, &jobs.Generate{Prompt: prompt, MaxTokens: ptr(maxTokens), Temperature: ptr(0.0)})
		res, err := waitResult(t, b.client, job.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p := res.Plan; p.KVPrecision != "f16" || p.NeedMiB != int(limit) || p.LimitMiB != int(limit) || p.Context != promptTokens+maxTokens {
			t.Errorf("plan %+v, want f16 KV needing the whole %d MiB limit", p, limit)
		}
		if res.Usage.PromptTokens != promptTokens || res.Usage.CompletionTokens != maxTokens {
			t.Errorf("usage %+v (%s), want %d prompt and %d generated tokens", res.Usage, res.FinishReason, promptTokens, maxTokens)
		}
	})

	t.Run("TooLargeIsArchivedWithExplanation", func(t *testing.T) {
		big := &jobs.Generate{Prompt: prompt, MaxTokens: ptr(jobs.MaxMaxTokens)}
		if _, err := b.client.Enqueue(context.Background(), big); !errors.Is(err, jobs.ErrNoCapacity) {
			t.Fatalf("enqueue: %v, want it refused (jobs.ErrNoCapacity)", err)
		}
		job := enqueue(t, b.client, big, jobs.EnqueueAnyway())
		st := waitFor(t, b.client, job.ID, "archive", func(st jobs.Status) bool { return st.State == jobs.StateArchived })
		for _, want := range []string{"does not fit on any live worker", "the fleet's largest is worker test-worker", "but the limit is", "fits with max_tokens ≤"} {
			if !strings.Contains(st.LastError, want) {
				t.Errorf("last error %q lacks %q", st.LastError, want)
			}
		}
		if st.Retried != 0 {
			t.Errorf("retried %d times", st.Retried)
		}
	})
}

// TestBoundedExpertCache runs a MoE job on a worker whose limit is one MiB short of holding
// every expert: the plan falls back to a bounded expert cache, and the text is the one full
// residency gives.
func TestBoundedExpertCache(t *testing.T) {
	b := setup(t)
	cfg := b.cfg
	cfg.Model = fixtures.Path(t, "models", "tiny-qwen3next-IQ2_XXS.gguf")
	lm, err := loadModel(cfg.Model, "", engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.close()
	const prompt, maxTokens = "Experts that do not all fit stay in a cache.", 8
	ids := lm.tok.EncodeWith(prompt, tokenizer.EncodeOpts{AddSpecial: true})
	full, err := planner.Choose(planner.Job{PromptTokens: len(ids), MaxTokens: maxTokens, Policy: planner.Policy{MaxChunk: cfg.MaxChunk}},
		lm.profile, planner.CPUPlaceholder(), planner.Budget{LimitMiB: 1 << 20, Source: planner.SourceOverride})
	if err != nil {
		t.Fatal(err)
	}
	// What full residency generates, on the test's own copy of the model.
	want := greedy(t, lm, prompt, maxTokens)

	cfg.GPULimitMiB = full.NeedMiB - 1
	d := startDaemon(t, cfg, Observer{})
	job := enqueue(t, b.client, &jobs.Generate{Prompt: prompt, MaxTokens: ptr(maxTokens), Temperature: ptr(0.0)})
	res, err := waitResult(t, b.client, job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Plan.ExpertResidency != string(planner.ResidencyCache) || res.Plan.ExpertCacheMiB <= 0 || res.Plan.NeedMiB > int(cfg.GPULimitMiB) {
		t.Errorf("plan %+v, want a bounded expert cache within %d MiB", res.Plan, cfg.GPULimitMiB)
	}
	if res.Text != want.Text || res.Usage.CompletionTokens != want.CompletionTokens {
		t.Errorf("with a bounded cache: %q (%d tokens); fully resident: %q (%d)", res.Text, res.Usage.CompletionTokens, want.Text, want.CompletionTokens)
	}
	expertMisses(t, d)
}
