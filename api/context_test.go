package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/redlite/batch/jobs"
)

// liveCapability waits for the test daemon's capability document and returns it.
func (b *bundle) liveCapability(t *testing.T) jobs.Capability {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(waitLimit)
	for {
		ids, err := b.rdb.ZRange(ctx, jobs.CapabilitiesIndex, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			data, err := b.rdb.Get(ctx, jobs.CapabilityKey(id)).Bytes()
			var c jobs.Capability
			if err == nil && json.Unmarshal(data, &c) == nil && c.MaxContext > 0 && c.Tokens.MaxTokenBytes > 0 {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no capability published within %v", waitLimit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// oversized is a text that, with max_tokens mt, no worker like c holds even counted with
// the fewest tokens it can have (MaxTokenBytes per token).
func oversized(t *testing.T, c jobs.Capability) (text string, mt int) {
	t.Helper()
	mt = min(jobs.MaxMaxTokens, c.MaxContext)
	n := (c.MaxContext - mt + 8) * c.Tokens.MaxTokenBytes
	if n > 4<<20 {
		t.Fatalf("the fixture's worker holds %d tokens of up to %d bytes: a prompt it cannot hold is over 4 MiB", c.MaxContext, c.Tokens.MaxTokenBytes)
	}
	return strings.Repeat("a", n), mt
}

// TestContextLengthExceeded: a job no live worker can hold is refused at submit with a 400
// context_length_exceeded naming the numbers, on every way in, and no job is created.
func TestContextLengthExceeded(t *testing.T) {
	b := setup(t, setupOpts{})
	c := b.liveCapability(t)
	text, mt := oversized(t, c)
	before := b.taskCount(t)

	body := generate(mt)
	delete(body, "messages")
	body["prompt"] = text
	code, data := b.call(t, tokenA, "POST", "/v1/jobs", body)
	wantError(t, "native", code, data, http.StatusBadRequest, "context_length_exceeded", "max_tokens")

	code, data = b.call(t, tokenA, "POST", "/v1/chat/completions", chatBody(b.modelName(), mt, text))
	wantError(t, "chat", code, data, http.StatusBadRequest, "context_length_exceeded", "max_tokens")

	cl := sdk(b, tokenA)
	batch := runBatch(t, cl, jsonl(t, 2, func(i int) map[string]any {
		if i == 0 {
			return chatBody(b.modelName(), mt, text)
		}
		return chatBody(b.modelName(), 2, "Say hello.")
	}))
	batch = pollBatch(t, cl, batch.ID, "final", finalStatus)
	if batch.Status != openai.BatchStatusCompleted || batch.RequestCounts.Failed != 1 || batch.RequestCounts.Completed != 1 || batch.ErrorFileID == "" {
		t.Fatalf("batch with one oversized line: %+v", batch)
	}
	line := readLines(t, cl, batch.ErrorFileID)["req-00"]
	var e apiErr
	if line.Response == nil || line.Response.StatusCode != http.StatusBadRequest || json.Unmarshal(line.Response.Body, &e) != nil ||
		e.Error.Code == nil || *e.Error.Code != "context_length_exceeded" || !strings.Contains(e.Error.Message, "max_tokens") {
		t.Errorf("oversized line: %+v", line)
	}
	// The native and chat requests created no job, the batch one job: its small line.
	if after := b.taskCount(t); after != before+1 {
		t.Errorf("%d tasks after, %d before: want the batch's one small line only", after, before)
	}
}

// TestContextLengthCounted: a prompt whose fewest possible tokens fit, so that routing lets
// it through, but which the worker's tokenizer counts too long, answers 400
// context_length_exceeded on chat completions and in a batch line, not 500 job_failed.
func TestContextLengthCounted(t *testing.T) {
	b := setup(t, setupOpts{})
	c := b.liveCapability(t)
	mt := min(jobs.MaxMaxTokens, c.MaxContext-1)
	room := c.MaxContext - mt // prompt tokens that fit
	const phrase = "The quick brown fox jumps over the lazy dog. "
	text := strings.Repeat(phrase, 8*room/len(phrase)+1) // ~8 bytes per room token: ~2 real tokens each
	if least := len(text)/c.Tokens.MaxTokenBytes + c.Tokens.TemplateTokens + 8; least > room {
		t.Fatalf("the fixture's longest token is %d bytes: %d bytes count at least %d tokens, past the %d that fit; routing would refuse them",
			c.Tokens.MaxTokenBytes, len(text), least, room)
	}
	code, data := b.call(t, tokenA, "POST", "/v1/chat/completions", chatBody(b.modelName(), mt, text))
	wantError(t, "chat", code, data, http.StatusBadRequest, "context_length_exceeded", "does not fit")
	t.Logf("worker holds %d tokens, longest token %d bytes; %d bytes, max_tokens %d: %s", c.MaxContext, c.Tokens.MaxTokenBytes, len(text), mt, data)

	cl := sdk(b, tokenA)
	batch := runBatch(t, cl, jsonl(t, 1, func(int) map[string]any { return chatBody(b.modelName(), mt, text) }))
	batch = pollBatch(t, cl, batch.ID, "final", finalStatus)
	if batch.Status != openai.BatchStatusCompleted || batch.RequestCounts.Failed != 1 || batch.ErrorFileID == "" {
		t.Fatalf("batch with one long line: %+v", batch)
	}
	line := readLines(t, cl, batch.ErrorFileID)["req-00"]
	var e apiErr
	if line.Response == nil || line.Response.StatusCode != http.StatusBadRequest || json.Unmarshal(line.Response.Body, &e) != nil ||
		e.Error.Code == nil || *e.Error.Code != "context_length_exceeded" {
		t.Errorf("long line: %+v", line)
	}
}
