package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlite/batch/daemon"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/jobs"
)

// redisURL is the examples' Redis, with a worker serving the tiny fixture model: TestMain
// starts both, since an example takes no *testing.T.
var redisURL string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	srv, stop, err := redistest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, "examples:", err)
		return 1
	}
	defer stop()
	redisURL = srv.URL(0)
	dir, ok := fixtures.Find()
	if !ok {
		fmt.Fprintln(os.Stderr, "examples: the fixtures (testdata/fixtures) are missing")
		return 1
	}
	cfg := daemon.DefaultConfig()
	cfg.RedisURL, cfg.Model, cfg.HTTPAddr, cfg.WorkerName = redisURL, filepath.Join(dir, "models", "tiny-qwen3-F32.gguf"), "off", "example-worker"
	cfg.GPULimitMiB, cfg.TaskCheckInterval = 4096, 20*time.Millisecond
	d, err := daemon.New(cfg, daemon.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registry: prometheus.NewRegistry()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "examples:", err)
		return 1
	}
	if err := d.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "examples:", err)
		return 1
	}
	defer d.Shutdown()
	return m.Run()
}

func ptr[T any](v T) *T { return &v }

// Enqueue a summary and wait for its result, following its progress.
func ExampleClient_Wait() {
	ctx := context.Background()
	client, err := jobs.NewClient(redisURL)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	job, err := client.Enqueue(ctx, &jobs.Summarize{
		Input:     "The quarterly report says revenue grew by 12 percent while costs stayed flat.",
		MaxTokens: ptr(8),
	})
	if err != nil {
		panic(err)
	}
	sawDecode := false
	res, err := client.Wait(ctx, job.ID, func(p jobs.Progress) {
		sawDecode = sawDecode || p.Phase == jobs.PhaseDecode
	})
	if err != nil {
		panic(err)
	}
	// The fixture model has random weights: its text is meaningless, and it may sample its
	// end-of-text token before max_tokens (finish "stop") or run to the limit ("length").
	n := res.Usage.CompletionTokens
	fmt.Println("type:", job.Type)
	fmt.Println("ended:", res.FinishReason == jobs.FinishStop && n <= 8 || res.FinishReason == jobs.FinishLength && n == 8)
	fmt.Println("worker:", res.Worker)
	// Output:
	// type: summarize
	// ended: true
	// worker: example-worker
}

// Follow a job's text as the worker generates it, a piece per token (or per
// REDLITE_STREAM_INTERVAL slice of a fast decode); the pieces put together are the result's
// text.
func ExampleClient_FollowText() {
	ctx := context.Background()
	client, err := jobs.NewClient(redisURL)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	job, err := client.Enqueue(ctx, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(40)})
	if err != nil {
		panic(err)
	}
	var text strings.Builder
	res, err := client.FollowText(ctx, job.ID, jobs.FollowOptions{
		OnText: func(d jobs.TextDelta) { text.WriteString(d.Text) }, // e.g. print d.Text
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("streamed the result's text:", text.String() == res.Text)
	// Output:
	// streamed the result's text: true
}

// An idempotency key makes a retried submit return the job already enqueued.
func ExampleClient_Enqueue() {
	ctx := context.Background()
	client, err := jobs.NewClient(redisURL)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	p := &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(4), Common: jobs.Common{IdempotencyKey: "story-42"}}
	first, err := client.Enqueue(ctx, p)
	if err != nil {
		panic(err)
	}
	again, err := client.Enqueue(ctx, p)
	fmt.Println("id:", first.ID)
	fmt.Println("duplicate:", errors.Is(err, jobs.ErrDuplicate), again.ID == first.ID)
	// Output:
	// id: story-42
	// duplicate: true true
}

// Cancel stops a job: a waiting one is archived at once, a running one within one chunk or
// token. Here the job waits for a model no worker serves yet (EnqueueAnyway), so the cancel
// finds it waiting.
func ExampleClient_Cancel() {
	ctx := context.Background()
	client, err := jobs.NewClient(redisURL)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	job, err := client.Enqueue(ctx, &jobs.Generate{Prompt: "Write a long story.", Common: jobs.Common{Model: "qwen3-next-80b"}},
		jobs.EnqueueAnyway())
	if err != nil {
		panic(err)
	}
	if err := client.Cancel(ctx, job.ID); err != nil {
		panic(err)
	}
	st, err := client.Status(ctx, job.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(st.State)
	// Output:
	// archived
}

// A webhook receiver checks the signature and timestamp of each delivery before it trusts
// the body (the worker signs with REDLITE_WEBHOOK_SECRET).
func ExampleVerifyWebhook() {
	secret := []byte("shared secret")
	body := []byte(`{"id":"job-1","state":"completed"}`)
	sent := time.Unix(1_767_225_600, 0)

	// What the worker sends in the Redlite-Timestamp and Redlite-Signature headers:
	timestamp, signature := fmt.Sprint(sent.Unix()), jobs.SignWebhook(secret, sent, body)

	err := jobs.VerifyWebhook(secret, timestamp, signature, body, sent.Add(5*time.Second), 0)
	fmt.Println("fresh:", err)
	err = jobs.VerifyWebhook(secret, timestamp, signature, []byte(`{"id":"job-1","state":"forged"}`), sent, 0)
	fmt.Println("tampered:", errors.Is(err, jobs.ErrWebhookSignature))
	err = jobs.VerifyWebhook(secret, timestamp, signature, body, sent.Add(time.Hour), 0)
	fmt.Println("replayed an hour later:", errors.Is(err, jobs.ErrWebhookSignature))
	// Output:
	// fresh: <nil>
	// tampered: true
	// replayed an hour later: true
}
