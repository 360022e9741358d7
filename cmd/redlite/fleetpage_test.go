package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redlite/batch/internal/dashboard"
	"github.com/redlite/batch/jobs"
)

// chromium finds Debian's chromium. Missing, the test fails under CI (.ci/run installs it)
// and is skipped elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found on PATH (apt-get install chromium)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestFleetPage starts Redis, a daemon and the dashboard, runs a slow job and reads its
// progress off the fleet page as a headless Chromium renders it: the worker with the longest job it holds,
// and the job's phase and token counts moving while it runs.
func TestFleetPage(t *testing.T) {
	if testing.Short() {
		t.Skip("a headless browser (-short skips it)")
	}
	browser := chromium(t)
	url := jobsSetup(t, true)
	client, err := jobs.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	dash, err := dashboard.New(url, jobs.TLSFiles{}, "/monitor", true)
	if err != nil {
		t.Fatal(err)
	}
	defer dash.Close()
	srv := httptest.NewServer(dash)
	defer srv.Close()

	job := enqueueLong(t, client)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Cancel(ctx, job.ID)
	}()

	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(browser),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()))
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	row := fmt.Sprintf(`#jobs tr[data-job=%q]`, job.ID)
	// text reads an element's text. The page re-renders its tables every second, so a node
	// found by the query can be gone when its text is read: that read is tried again.
	text := func(sel string) (string, error) {
		for i := 0; ; i++ {
			s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
			if err == nil || i == 10 || !strings.Contains(err.Error(), "No node with given id") {
				return s, err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	generated := func() int {
		t.Helper()
		text, err := text(row + " td.generated")
		if err != nil {
			t.Fatalf("read the job's generated tokens: %v", err)
		}
		n, err := strconv.Atoi(strings.Split(text, "/")[0])
		if err != nil {
			t.Fatalf("generated %q: %v", text, err)
		}
		return n
	}
	workerRow := chromedp.CSS(`#workers tr[data-worker="cli-test-worker"]`)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/monitor"+dashboard.FleetPath),
		chromedp.WaitVisible(workerRow),
		chromedp.WaitVisible(chromedp.CSS(row)),
	); err != nil {
		t.Fatalf("the fleet page never showed the worker and the job: %v", err)
	}
	worker, err := text(`#workers tr[data-worker="cli-test-worker"]`)
	if err != nil {
		t.Fatal(err)
	}
	caps, err := client.Capabilities(context.Background())
	if err != nil || len(caps) != 1 {
		t.Fatalf("capabilities %+v %v, want the worker's", caps, err)
	}
	for _, want := range []string{"tiny-qwen3", "cpu", "4096 MiB", fmt.Sprintf("%d tokens", caps[0].MaxContext)} {
		if !strings.Contains(worker, want) {
			t.Errorf("worker row %q lacks %q", worker, want)
		}
	}
	// The page refreshes every second; the job decodes thousands of tokens meanwhile.
	first := generated()
	start := time.Now()
	for {
		phase, err := text(row + " td.phase")
		if err != nil {
			t.Fatal(err)
		}
		if n := generated(); phase == "decode" && n > first && n > 0 {
			t.Logf("progress on the page: %d → %d tokens generated in %v", first, n, time.Since(start).Round(time.Millisecond))
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the page's progress never moved past %d tokens (phase %q)", first, phase)
		case <-time.After(100 * time.Millisecond):
		}
	}
	buckets, err := text(`#buckets tbody`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buckets, job.Queue) {
		t.Errorf("queues per bucket %q lack the job's queue %s", buckets, job.Queue)
	}
}

// enqueueLong enqueues a greedy job that runs for many seconds on the tiny model: nothing in
// its 32,768 tokens is an end-of-generation token, so only a cancel ends it early.
func enqueueLong(t *testing.T, c *jobs.Client) jobs.Job {
	t.Helper()
	maxTokens, temp := jobs.MaxMaxTokens, 0.0
	job, err := c.Enqueue(context.Background(), &jobs.Generate{Prompt: "Once upon a time", MaxTokens: &maxTokens, Temperature: &temp})
	if err != nil {
		t.Fatal(err)
	}
	return job
}
