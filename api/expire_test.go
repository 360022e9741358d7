package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/redlite/batch/api"
	"github.com/redlite/batch/jobs"
)

// TestBatchExpires moves a batch's 24-hour window into the past while its requests wait
// (no worker runs): the runner ends it expired, every request in the error file as
// batch_expired and its job archived.
func TestBatchExpires(t *testing.T) {
	b := setup(t, setupOpts{noDaemon: true})
	c := sdk(b, tokenA)
	ctx := context.Background()
	const n = 3
	batch := runBatch(t, c, jsonl(t, n, func(int) map[string]any { return chatBody("", 2, "Hi.") }))
	pollBatch(t, c, batch.ID, "in progress", func(b *openai.Batch) bool { return b.Status == openai.BatchStatusInProgress })

	// Change the stored batch under its lock, as a runner would, so no step overwrites it.
	lock, key := "redlite:api:batch:"+batch.ID+":lock", "redlite:api:batch:"+batch.ID
	waitFor(t, "the batch lock", func() bool { return b.rdb.SetNX(ctx, lock, "test", 10*time.Second).Val() })
	var st map[string]any
	if err := json.Unmarshal([]byte(b.rdb.Get(ctx, key).Val()), &st); err != nil {
		t.Fatal(err)
	}
	st["expires_at"] = time.Now().Add(-time.Second).Unix()
	data, _ := json.Marshal(st)
	b.rdb.Set(ctx, key, data, 0)
	b.rdb.Del(ctx, lock)

	done := pollBatch(t, c, batch.ID, "final", finalStatus)
	if done.Status != openai.BatchStatusExpired || done.ExpiredAt == 0 || done.OutputFileID != "" || done.RequestCounts.Completed != 0 {
		t.Fatalf("batch: %+v", done)
	}
	errs := readLines(t, c, done.ErrorFileID)
	if len(errs) != n {
		t.Fatalf("error file: %d lines, want %d", len(errs), n)
	}
	for i := range n {
		if l := errs[fmt.Sprintf("req-%02d", i)]; l.Error == nil || l.Error.Code != "batch_expired" {
			t.Errorf("line %d: %+v", i, l)
		}
		code, data := b.call(t, tokenA, "GET", fmt.Sprintf("/v1/jobs/%s:%d", batch.ID, i), nil)
		var v api.JobView
		if code != http.StatusOK || json.Unmarshal(data, &v) != nil || v.State != jobs.StateArchived {
			t.Errorf("job of line %d: %d %s", i, code, data)
		}
	}
}

// waitFor polls cond until it holds, within waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, waitLimit)
		}
		<-tick.C
	}
}
