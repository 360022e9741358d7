package httpapi_test

import (
	"fmt"
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
