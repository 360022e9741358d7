package api_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestAPIRestartMidBatch stops the API twice while a batch runs (once just after it is
// created, once with part of it done) and starts a new instance on the same Redis each
// time; the daemon goes on meanwhile. The batch completes with exactly one output line per
// request.
func TestAPIRestartMidBatch(t *testing.T) {
	b := setup(t, setupOpts{})
	c := sdk(b, tokenA)
	model := b.modelName()
	const n = 24
	// Line 0 is short; the others take long enough that the second stop comes mid-batch.
	input := jsonl(t, n, func(i int) map[string]any {
		if i == 0 {
			return chatBody(model, 2, "Hi.")
		}
		return chatBody(model, 96, fmt.Sprintf("Tell story number %d.", i))
	})
	batch := runBatch(t, c, input)

	b.api.Shutdown()
	b.startAPI(t)
	c = sdk(b, tokenA)
	mid := pollBatch(t, c, batch.ID, "partly done", func(b *openai.Batch) bool { return b.RequestCounts.Completed >= 1 })
	b.api.Shutdown()
	if finalStatus(mid) || mid.RequestCounts.Completed == n {
		t.Fatalf("the batch was done before the second stop: %+v", mid)
	}
	b.startAPI(t)
	c = sdk(b, tokenA)

	done := pollBatch(t, c, batch.ID, "final", finalStatus)
	if done.Status != openai.BatchStatusCompleted || done.RequestCounts.Completed != n || done.RequestCounts.Failed != 0 {
		t.Fatalf("batch: %+v", done)
	}
	lines := readLines(t, c, done.OutputFileID)
	if len(lines) != n {
		t.Fatalf("output: %d lines, want %d", len(lines), n)
	}
	for i := range n {
		if l, ok := lines[fmt.Sprintf("req-%02d", i)]; !ok || l.Response == nil || l.Response.StatusCode != 200 {
			t.Errorf("line %d: %+v", i, l)
		}
	}
	t.Logf("stopped at %d of %d requests done", mid.RequestCounts.Completed, n)
}

// TestTwoInstances runs two API instances on one Redis, as behind a load balancer: a batch
// uploaded and created through one is followed and read through the other, and each serves
// the other's jobs.
func TestTwoInstances(t *testing.T) {
	b1 := setup(t, setupOpts{})
	b2 := *b1
	b2.cfg.Addr = "127.0.0.1:0"
	b2.startAPI(t)
	c1, c2 := sdk(b1, tokenA), sdk(&b2, tokenA)
	model := b1.modelName()
	const n = 20
	batch := runBatch(t, c1, jsonl(t, n, func(i int) map[string]any { return chatBody(model, 2+i%2, "Hi.") }))
	done := pollBatch(t, c2, batch.ID, "final", finalStatus)
	if done.Status != openai.BatchStatusCompleted || done.RequestCounts.Completed != n {
		t.Fatalf("batch: %+v", done)
	}
	if lines := readLines(t, c2, done.OutputFileID); len(lines) != n {
		t.Errorf("output through the other instance: %d lines, want %d", len(lines), n)
	}
	v := b1.submit(t, tokenA, generate(2), 201)
	if code, data := b2.call(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/result?wait=60s", nil); code != 200 {
		t.Errorf("a job of one instance through the other: %d %s", code, data)
	}
}

// TestAPIKilledMidBatch runs the API as a process and kills it (SIGKILL) with the batch part
// done, possibly in the middle of a step and holding the batch's lock; an instance started
// afterwards finishes the batch once the lock has lapsed, with one output line per request.
func TestAPIKilledMidBatch(t *testing.T) {
	b := setup(t, setupOpts{})
	model := b.modelName()
	// The child listens on a port of its own and runs the batch; the in-process instance of
	// setup is stopped first, so that only the child can step it.
	b.api.Shutdown()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "REDLITE_TEST_AS_API=1", "REDLITE_REDIS_URL="+b.cfg.RedisURL, "REDLITE_API_ADDR="+addr,
		"REDLITE_API_TOKENS="+tokenA, "REDLITE_API_BATCH_INTERVAL=50ms", "REDLITE_API_POLL_INTERVAL=20ms", "REDLITE_API_RATE_LIMIT=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	child := *b
	child.base = "http://" + addr
	waitFor(t, "the API process", func() bool {
		resp, err := http.Get(child.base + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	c := sdk(&child, tokenA)
	const n = 24
	input := jsonl(t, n, func(i int) map[string]any {
		if i == 0 {
			return chatBody(model, 2, "Hi.")
		}
		return chatBody(model, 96, fmt.Sprintf("Tell story number %d.", i))
	})
	batch := runBatch(t, c, input)
	mid := pollBatch(t, c, batch.ID, "partly done", func(b *openai.Batch) bool { return b.RequestCounts.Completed >= 1 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true
	if finalStatus(mid) || mid.RequestCounts.Completed == n {
		t.Fatalf("the batch was done before the kill: %+v", mid)
	}

	b.startAPI(t)
	c = sdk(b, tokenA)
	done := pollBatch(t, c, batch.ID, "final", finalStatus)
	if done.Status != openai.BatchStatusCompleted || done.RequestCounts.Completed != n || done.RequestCounts.Failed != 0 {
		t.Fatalf("batch: %+v\nkilled API's log:\n%s", done, out.String())
	}
	if lines := readLines(t, c, done.OutputFileID); len(lines) != n {
		t.Fatalf("output: %d lines, want %d", len(lines), n)
	}
	t.Logf("killed at %d of %d requests done", mid.RequestCounts.Completed, n)
}
