package api_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/redlite/batch/jobs"
)

// TestStreamReset: a job whose second attempt writes other text than its first (a worker
// died; the retry ran on another model) makes GET /v1/jobs/{id}/events send "reset" and the
// new text from its start. The test writes the stream entries as the attempts' workers would
// (jobs.Client.AppendText) into a job that no worker takes.
func TestStreamReset(t *testing.T) {
	b := setup(t, setupOpts{noDaemon: true})
	ctx := context.Background()
	c, err := jobs.NewClient(b.cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	job, err := c.Enqueue(ctx, &jobs.Generate{Prompt: "x"}, jobs.EnqueueAnyway(), jobs.JobID("reset-job"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(tokenA))
	if err := b.rdb.Set(ctx, jobs.JobOwnerKey(job.ID), hex.EncodeToString(sum[:8]), 0).Err(); err != nil {
		t.Fatal(err)
	}

	resp := b.send(t, tokenA, "GET", "/v1/jobs/"+job.ID+"/events", nil)
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	// next reads events up to the next one of a name other than progress.
	next := func() sseEvent {
		t.Helper()
		var e sseEvent
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				e.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				e.data = strings.TrimPrefix(line, "data: ")
			case strings.HasPrefix(line, "id: "):
				e.id = strings.TrimPrefix(line, "id: ")
			case line == "" && e.name != "" && e.name != "progress":
				return e
			case line == "":
				e = sseEvent{}
			}
		}
	}
	text := func(e sseEvent) string {
		var d struct{ Text string }
		if e.name != "delta" || json.Unmarshal([]byte(e.data), &d) != nil {
			t.Fatalf("event %+v, want a delta", e)
		}
		return d.Text
	}
	if err := c.AppendText(ctx, job.ID, jobs.TextPiece{Text: "Once upon", Generated: 2}); err != nil {
		t.Fatal(err)
	}
	if got := text(next()); got != "Once upon" {
		t.Fatalf("first delta %q", got)
	}
	// The retry repeats "Once " (nothing to send), then goes another way.
	if err := c.AppendText(ctx, job.ID, jobs.TextPiece{Attempt: 1, Text: "Once ", Generated: 1},
		jobs.TextPiece{Attempt: 1, Text: "there", TextOffset: 5, Generated: 2},
		jobs.TextPiece{Attempt: 0, Text: " a time", TextOffset: 9, Generated: 4}, // the first attempt, late
		jobs.TextPiece{Attempt: 1, Text: " was", TextOffset: 10, Generated: 3}); err != nil {
		t.Fatal(err)
	}
	if e := next(); e.name != "reset" || e.data != `{"attempt":2}` {
		t.Fatalf("event %+v, want reset to attempt 2", e)
	}
	if got := text(next()) + text(next()); got != "Once there was" {
		t.Errorf("after the reset: %q, want the new attempt's text from its start", got)
	}
	// The job is cancelled: the stream ends with the error.
	if code, data := b.call(t, tokenA, "DELETE", "/v1/jobs/"+job.ID, nil); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, data)
	}
	if e := next(); e.name != "error" || !strings.Contains(e.data, "job_cancelled") {
		t.Errorf("last event %+v, want the cancel", e)
	}
}
