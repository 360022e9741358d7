package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/redlite/batch/api"
	"github.com/redlite/batch/jobs"
)

// upload posts content as a batch input file for token and returns the file's id.
func (b *bundle) upload(t *testing.T, token string, content []byte) (code int, data []byte) {
	t.Helper()
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	fw.Write(content)
	mw.Close()
	return b.call(t, token, "POST", "/v1/files", form.Bytes(), "Content-Type", mw.FormDataContentType())
}

// idOf reads the "id" of a JSON object.
func idOf(t *testing.T, data []byte) string {
	t.Helper()
	var v struct{ ID string }
	if err := json.Unmarshal(data, &v); err != nil || v.ID == "" {
		t.Fatalf("no id in %s (%v)", data, err)
	}
	return v.ID
}

// listIDs gets a list (files, batches) as token and returns its ids.
func (b *bundle) listIDs(t *testing.T, token, path string) []string {
	t.Helper()
	code, data := b.call(t, token, "GET", path, nil)
	var l struct {
		Data []struct{ ID string } `json:"data"`
	}
	if code != http.StatusOK || json.Unmarshal(data, &l) != nil {
		t.Fatalf("list: %d %s", code, data)
	}
	var out []string
	for _, d := range l.Data {
		out = append(out, d.ID)
	}
	return out
}

// notFoundBody is the 404 of an id as the API words it, with the id replaced, so that the
// answer for another token's id can be compared with that for an id that never existed.
func notFoundBody(data []byte, id string) string {
	return strings.ReplaceAll(string(data), id, "<id>")
}

// TestTenants is issue 25's check: token A's jobs (native, hierarchical with its children,
// batch lines, chat), files and batches are invisible and untouchable for token B on every
// route: each answers exactly as for an id that does not exist (404, never 403), lists leave
// them out, GET /v1/workers shows A's running job to B without its id, and an idempotency key
// is B's own. A's work is intact afterwards.
func TestTenants(t *testing.T) {
	b := setup(t, setupOpts{})
	model := b.modelName()

	// A's work: a finished job under an idempotency key, a hierarchical summary, a chat, a
	// batch with its files, and a job decoding while B looks at the fleet.
	jobA := b.submit(t, tokenA, generate(3, "metadata", map[string]string{"secret": "a"}), http.StatusCreated, "Idempotency-Key", "shared-key")
	sumA := b.submit(t, tokenA, map[string]any{"type": "summarize", "version": 1, "strategy": "hierarchical", "max_tokens": 3,
		"input": "# One\n\nThe cat sat on the mat. It was warm.\n\n# Two\n\nThe dog slept by the door. It was cold."}, http.StatusCreated)
	code, data := b.call(t, tokenA, "POST", "/v1/chat/completions", chatBody(model, 3, "Hi."))
	if code != http.StatusOK {
		t.Fatalf("chat: %d %s", code, data)
	}
	chatJob := strings.TrimPrefix(idOf(t, data), "chatcmpl-")
	code, data = b.call(t, tokenA, "POST", "/v1/completions", map[string]any{"model": model, "prompt": "Hi.", "max_tokens": 3})
	if code != http.StatusOK {
		t.Fatalf("completion: %d %s", code, data)
	}
	completionJob := strings.TrimPrefix(idOf(t, data), "cmpl-")
	code, data = b.call(t, tokenA, "POST", "/v1/responses", map[string]any{"model": model, "input": "Hi.", "max_output_tokens": 3})
	if code != http.StatusOK {
		t.Fatalf("response: %d %s", code, data)
	}
	responseJob := strings.TrimPrefix(idOf(t, data), "resp_")
	code, data = b.upload(t, tokenA, jsonl(t, 2, func(i int) map[string]any { return chatBody(model, 2, fmt.Sprintf("Say %d.", i)) }))
	if code != http.StatusOK {
		t.Fatalf("upload: %d %s", code, data)
	}
	fileA := idOf(t, data)
	code, data = b.call(t, tokenA, "POST", "/v1/batches", map[string]any{"input_file_id": fileA, "endpoint": "/v1/chat/completions", "completion_window": "24h"})
	if code != http.StatusOK {
		t.Fatalf("batch: %d %s", code, data)
	}
	batchA := idOf(t, data)
	// B tries to cancel the batch while it is young; it must still complete.
	code, data = b.call(t, tokenB, "POST", "/v1/batches/"+batchA+"/cancel", nil)
	wantError(t, "B cancels A's batch", code, data, http.StatusNotFound, "not_found", batchA)

	for _, id := range []string{jobA.ID, sumA.ID} {
		if code, data := b.call(t, tokenA, "GET", "/v1/jobs/"+id+"/result?wait=60s", nil); code != http.StatusOK {
			t.Fatalf("A's job %s: %d %s", id, code, data)
		}
	}
	var batch api.Batch
	waitFor(t, "A's batch completed", func() bool {
		code, data := b.call(t, tokenA, "GET", "/v1/batches/"+batchA, nil)
		return code == http.StatusOK && json.Unmarshal(data, &batch) == nil && batch.Status == "completed"
	})
	if batch.RequestCounts.Completed != 2 || batch.OutputFileID == nil {
		t.Fatalf("A's batch: %+v", batch)
	}
	lines := []string{batchA + ":0", batchA + ":1"}
	children := b.childIDs(t, sumA.ID)

	running := generate(jobs.MaxMaxTokens)
	delete(running, "messages")
	running["prompt"] = "Once upon a time"
	runA := b.submit(t, tokenA, running, http.StatusCreated)
	events := b.send(t, tokenA, "GET", "/v1/jobs/"+runA.ID+"/events", nil)
	defer events.Body.Close()
	rd := bufio.NewReader(events.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("A's running job: events ended before decoding: %v", err)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"phase":"decode"`) {
			break
		}
	}

	// A job enqueued straight into Redis (CLI, Go client) has no owner: no token sees it.
	c, err := jobs.NewClient(b.cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// One token: done long before the worker list below, which expects A's job alone.
	one := 1
	ownerless, err := c.Enqueue(context.Background(), &jobs.Generate{Version: 1, Prompt: "x", MaxTokens: &one, Common: jobs.Common{IdempotencyKey: "cli-job"}}, jobs.EnqueueAnyway())
	if err != nil {
		t.Fatal(err)
	}

	aJobs := append([]string{jobA.ID, sumA.ID, chatJob, completionJob, responseJob, runA.ID}, append(lines, children...)...)
	t.Run("AOwnsItsJobs", func(t *testing.T) {
		for _, id := range aJobs {
			if code, data := b.call(t, tokenA, "GET", "/v1/jobs/"+id, nil); code != http.StatusOK {
				t.Errorf("A reads its job %s: %d %s", id, code, data)
			}
		}
	})

	t.Run("JobRoutes", func(t *testing.T) {
		_, never := b.call(t, tokenB, "GET", "/v1/jobs/never-was", nil)
		for _, id := range append(aJobs, ownerless.ID) {
			for _, r := range []struct{ method, path string }{
				{"GET", "/v1/jobs/" + id},
				{"GET", "/v1/jobs/" + id + "/result"},
				{"GET", "/v1/jobs/" + id + "/result?wait=1s"},
				{"GET", "/v1/jobs/" + id + "/events"},
				{"DELETE", "/v1/jobs/" + id},
			} {
				code, data := b.call(t, tokenB, r.method, r.path, nil)
				wantError(t, "B: "+r.method+" "+r.path, code, data, http.StatusNotFound, "not_found", id)
				if r.method == "GET" && r.path == "/v1/jobs/"+id && notFoundBody(data, id) != notFoundBody(never, "never-was") {
					t.Errorf("B's 404 for %s differs from one for an id that never was:\n%s\n%s", id, data, never)
				}
			}
		}
		if code, data := b.call(t, tokenA, "GET", "/v1/jobs/"+ownerless.ID, nil); code != http.StatusNotFound {
			t.Errorf("A reads a job without an owner: %d %s", code, data)
		}
	})

	t.Run("Workers", func(t *testing.T) {
		active := func(token string) []jobs.ActiveJob {
			code, data := b.call(t, token, "GET", "/v1/workers", nil)
			var ws struct {
				Data []jobs.WorkerServer `json:"data"`
			}
			if code != http.StatusOK || json.Unmarshal(data, &ws) != nil || len(ws.Data) != 1 {
				t.Fatalf("workers: %d %s", code, data)
			}
			if token == tokenB && strings.Contains(string(data), runA.ID) {
				t.Errorf("B's worker list names A's job %s: %s", runA.ID, data)
			}
			for _, a := range ws.Data[0].Active {
				if p := a.Progress; p != nil && (p.Text != "" || p.Reasoning != "") {
					t.Errorf("the worker list shows a running job's text: %+v", p)
				}
			}
			return ws.Data[0].Active
		}
		// asynq lists a worker's jobs with its next heartbeat (every 5 s).
		waitFor(t, "the worker lists A's running job", func() bool { return len(active(tokenA)) > 0 })
		if a := active(tokenA); len(a) != 1 || a[0].ID != runA.ID {
			t.Errorf("A's view of the worker: %+v, want its running job %s", a, runA.ID)
		}
		if a := active(tokenB); len(a) != 1 || a[0].ID != "" || a[0].Type != jobs.TypeGenerate {
			t.Errorf("B's view of the worker: %+v, want one generate job without an id", a)
		}
	})

	t.Run("Files", func(t *testing.T) {
		_, never := b.call(t, tokenB, "GET", "/v1/files/file-never", nil)
		for _, id := range []string{fileA, *batch.OutputFileID} {
			for _, r := range []struct{ method, path string }{
				{"GET", "/v1/files/" + id},
				{"GET", "/v1/files/" + id + "/content"},
				{"DELETE", "/v1/files/" + id},
			} {
				code, data := b.call(t, tokenB, r.method, r.path, nil)
				wantError(t, "B: "+r.method+" "+r.path, code, data, http.StatusNotFound, "not_found", id)
				if r.path == "/v1/files/"+id && r.method == "GET" && notFoundBody(data, id) != notFoundBody(never, "file-never") {
					t.Errorf("B's 404 for %s differs from one for a file that never was:\n%s\n%s", id, data, never)
				}
			}
		}
		code, data := b.call(t, tokenB, "POST", "/v1/batches", map[string]any{"input_file_id": fileA, "endpoint": "/v1/chat/completions", "completion_window": "24h"})
		wantError(t, "B's batch on A's file", code, data, http.StatusNotFound, "not_found", fileA)
		code, data = b.upload(t, tokenB, []byte(`{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`+"\n"))
		if code != http.StatusOK {
			t.Fatalf("B's upload: %d %s", code, data)
		}
		fileB := idOf(t, data)
		if ids := b.listIDs(t, tokenB, "/v1/files?limit=100"); !slices.Equal(ids, []string{fileB}) {
			t.Errorf("B's files: %v, want only its own %s", ids, fileB)
		}
		code, data = b.call(t, tokenB, "GET", "/v1/files?after="+fileA, nil)
		wantError(t, "B pages after A's file", code, data, http.StatusBadRequest, "invalid_request", "no object")
	})

	t.Run("Batches", func(t *testing.T) {
		_, never := b.call(t, tokenB, "GET", "/v1/batches/batch_never", nil)
		for _, r := range []struct{ method, path string }{
			{"GET", "/v1/batches/" + batchA},
			{"POST", "/v1/batches/" + batchA + "/cancel"},
		} {
			code, data := b.call(t, tokenB, r.method, r.path, nil)
			wantError(t, "B: "+r.method+" "+r.path, code, data, http.StatusNotFound, "not_found", batchA)
			if notFoundBody(data, batchA) != notFoundBody(never, "batch_never") {
				t.Errorf("B's 404 for %s differs from one for a batch that never was:\n%s\n%s", batchA, data, never)
			}
		}
		if ids := b.listIDs(t, tokenB, "/v1/batches?limit=100"); len(ids) != 0 {
			t.Errorf("B's batches: %v, want none", ids)
		}
	})

	t.Run("IdempotencyKeys", func(t *testing.T) {
		for _, key := range []string{"shared-key", jobA.ID} {
			v := b.submit(t, tokenB, generate(2), http.StatusCreated, "Idempotency-Key", key)
			if v.ID == jobA.ID || v.Duplicate {
				t.Errorf("B's key %q: %+v, want a new job of its own", key, v)
			}
		}
	})

	t.Run("AIntact", func(t *testing.T) {
		code, data := b.call(t, tokenA, "GET", "/v1/jobs/"+runA.ID, nil)
		var v api.JobView
		if code != http.StatusOK || json.Unmarshal(data, &v) != nil || v.State != jobs.StateActive {
			t.Errorf("A's running job after B's cancel: %d %s", code, data)
		}
		code, data = b.call(t, tokenA, "GET", "/v1/jobs/"+jobA.ID+"/result", nil)
		var res jobs.Result
		if code != http.StatusOK || json.Unmarshal(data, &res) != nil || string(res.Metadata) != `{"secret":"a"}` {
			t.Errorf("A's result: %d %s", code, data)
		}
		for _, id := range []string{fileA, *batch.OutputFileID} {
			if code, data := b.call(t, tokenA, "GET", "/v1/files/"+id+"/content", nil); code != http.StatusOK || len(data) == 0 {
				t.Errorf("A's file %s: %d %s", id, code, data)
			}
		}
		if ids := b.listIDs(t, tokenA, "/v1/files?limit=100"); !slices.Contains(ids, fileA) || !slices.Contains(ids, *batch.OutputFileID) {
			t.Errorf("A's files: %v", ids)
		}
		if code, data := b.call(t, tokenA, "DELETE", "/v1/jobs/"+runA.ID, nil); code != http.StatusOK {
			t.Errorf("A cancels its job: %d %s", code, data)
		}
	})
}

// childIDs lists the child jobs of a hierarchical summary from its result's tree.
func (b *bundle) childIDs(t *testing.T, parent string) []string {
	t.Helper()
	keys, err := b.rdb.Keys(context.Background(), "asynq:{*}:t:"+parent+".l*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		out = append(out, k[strings.LastIndex(k, ":t:")+3:])
	}
	if len(out) == 0 {
		t.Fatalf("summary %s has no child jobs", parent)
	}
	return out
}
