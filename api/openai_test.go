package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/pagination"
)

// The official OpenAI Go SDK, unmodified, pointed at the API with a real daemon behind it.

func sdk(b *bundle, token string) openai.Client {
	return openai.NewClient(option.WithBaseURL(b.base+"/v1/"), option.WithAPIKey(token), option.WithMaxRetries(0))
}

// jsonl makes a batch input file of chat completions; body returns the body of line i.
func jsonl(t *testing.T, n int, body func(i int) map[string]any) []byte {
	t.Helper()
	return jsonlOf(t, "/v1/chat/completions", n, body)
}

// jsonlOf makes a batch input file whose lines go to url.
func jsonlOf(t *testing.T, url string, n int, body func(i int) map[string]any) []byte {
	t.Helper()
	var buf bytes.Buffer
	for i := range n {
		line, err := json.Marshal(map[string]any{"custom_id": fmt.Sprintf("req-%02d", i), "method": "POST", "url": url, "body": body(i)})
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

func chatBody(model string, maxTokens int, content string) map[string]any {
	return map[string]any{"model": model, "max_tokens": maxTokens, "temperature": 0,
		"messages": []map[string]string{{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}}}
}

// runBatch uploads input, creates a batch of chat completions and returns it.
func runBatch(t *testing.T, c openai.Client, input []byte) *openai.Batch {
	t.Helper()
	return runBatchOf(t, c, input, openai.BatchNewParamsEndpointV1ChatCompletions)
}

// runBatchOf uploads input, creates a batch for endpoint and returns it.
func runBatchOf(t *testing.T, c openai.Client, input []byte, endpoint openai.BatchNewParamsEndpoint) *openai.Batch {
	t.Helper()
	ctx := context.Background()
	f, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(input), "input.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	if f.Bytes != int64(len(input)) || f.Purpose != "batch" || f.Filename != "input.jsonl" {
		t.Errorf("uploaded file: %+v", f)
	}
	batch, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: endpoint,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: map[string]string{"test": t.Name()}})
	if err != nil {
		t.Fatalf("create batch: %v", err)
	}
	if batch.Status != openai.BatchStatusValidating || batch.InputFileID != f.ID || batch.Metadata["test"] != t.Name() {
		t.Errorf("new batch: %+v", batch)
	}
	return batch
}

// pollBatch gets the batch until cond holds, within waitLimit.
func pollBatch(t *testing.T, c openai.Client, id string, what string, cond func(*openai.Batch) bool) *openai.Batch {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := c.Batches.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("get batch: %v", err)
		}
		if cond(b) {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s not %s within %v: %+v", id, what, waitLimit, b)
		}
		<-tick.C
	}
}

func finalStatus(b *openai.Batch) bool {
	switch b.Status {
	case openai.BatchStatusCompleted, openai.BatchStatusFailed, openai.BatchStatusCancelled, openai.BatchStatusExpired:
		return true
	}
	return false
}

type outLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// readLines downloads a file with the SDK and decodes its lines by custom_id.
func readLines(t *testing.T, c openai.Client, fileID string) map[string]outLine {
	t.Helper()
	resp, err := c.Files.Content(context.Background(), fileID)
	if err != nil {
		t.Fatalf("file content %s: %v", fileID, err)
	}
	defer resp.Body.Close()
	out := map[string]outLine{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		var l outLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("file %s: line %q: %v", fileID, sc.Text(), err)
		}
		if _, dup := out[l.CustomID]; dup {
			t.Errorf("file %s: custom_id %q twice", fileID, l.CustomID)
		}
		out[l.CustomID] = l
	}
	return out
}

func TestOpenAIGoSDK(t *testing.T) {
	b := setup(t, setupOpts{})
	c := sdk(b, tokenA)
	ctx := context.Background()
	model := b.modelName()

	t.Run("Batch", func(t *testing.T) {
		const n = 24
		input := jsonl(t, n, func(i int) map[string]any { return chatBody(model, 3+i%3, fmt.Sprintf("Count to %d.", i)) })
		batch := runBatch(t, c, input)
		batch = pollBatch(t, c, batch.ID, "final", finalStatus)
		if batch.Status != openai.BatchStatusCompleted || batch.RequestCounts.Total != n || batch.RequestCounts.Completed != n ||
			batch.RequestCounts.Failed != 0 || batch.OutputFileID == "" || batch.ErrorFileID != "" ||
			batch.InProgressAt == 0 || batch.FinalizingAt == 0 || batch.CompletedAt == 0 {
			t.Fatalf("batch: %+v", batch)
		}
		lines := readLines(t, c, batch.OutputFileID)
		if len(lines) != n {
			t.Fatalf("output file: %d lines, want %d", len(lines), n)
		}
		for i := range n {
			id := fmt.Sprintf("req-%02d", i)
			l, ok := lines[id]
			if !ok || l.Response == nil || l.Response.StatusCode != 200 || l.Error != nil {
				t.Fatalf("output line %s: %+v", id, l)
			}
			var cc openai.ChatCompletion
			if err := json.Unmarshal(l.Response.Body, &cc); err != nil {
				t.Fatal(err)
			}
			if cc.Object != "chat.completion" || len(cc.Choices) != 1 || cc.Choices[0].Message.Role != "assistant" ||
				cc.Usage.CompletionTokens < 1 || cc.Usage.CompletionTokens > int64(3+i%3) || cc.Model != model ||
				(cc.Choices[0].FinishReason != "stop" && cc.Choices[0].FinishReason != "length") {
				t.Errorf("line %s: %s", id, l.Response.Body)
			}
		}
		// The batch's usage sums its lines'; its model is theirs; unset fields are null.
		var in, out int64
		for _, l := range lines {
			var cc openai.ChatCompletion
			json.Unmarshal(l.Response.Body, &cc)
			in, out = in+cc.Usage.PromptTokens, out+cc.Usage.CompletionTokens
		}
		if batch.Model != model || batch.Usage.InputTokens != in || batch.Usage.OutputTokens != out || batch.Usage.TotalTokens != in+out || in < n {
			t.Errorf("batch model %q usage %+v; want %q and %d in + %d out", batch.Model, batch.Usage, model, in, out)
		}
		code, data := b.call(t, tokenA, "GET", "/v1/batches/"+batch.ID, nil)
		var raw map[string]json.RawMessage
		if code != http.StatusOK || json.Unmarshal(data, &raw) != nil {
			t.Fatalf("GET batch: %d %s", code, data)
		}
		for _, k := range []string{"errors", "error_file_id", "failed_at", "expired_at", "cancelling_at", "cancelled_at"} {
			if v, ok := raw[k]; !ok || string(v) != "null" {
				t.Errorf("batch field %s: %s, want null", k, v)
			}
		}
		// The output file is an ordinary file: listed, fetched, deleted.
		f, err := c.Files.Get(ctx, batch.OutputFileID)
		if err != nil || f.Purpose != "batch_output" {
			t.Errorf("output file: %+v %v", f, err)
		}
		list, err := c.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(1)})
		if err != nil || len(list.Data) != 1 || list.Data[0].ID != batch.ID {
			t.Errorf("list batches: %+v %v", list, err)
		}
		if del, err := c.Files.Delete(ctx, batch.InputFileID); err != nil || !del.Deleted {
			t.Errorf("delete input: %+v %v", del, err)
		}
		if _, err := c.Files.Get(ctx, batch.InputFileID); err == nil || !strings.Contains(err.Error(), "404") {
			t.Errorf("deleted file: %v, want 404", err)
		}
	})

	t.Run("RefusedLines", func(t *testing.T) {
		input := jsonl(t, 4, func(i int) map[string]any {
			body := chatBody(model, 2, "Hi.")
			switch i {
			case 3:
				body["model"] = "gpt-4o"
			case 1:
				body["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}}
			case 2:
				body["temperature"] = 5
			}
			return body
		})
		batch := pollBatch(t, c, runBatch(t, c, input).ID, "final", finalStatus)
		if batch.Status != openai.BatchStatusCompleted || batch.RequestCounts.Total != 4 || batch.RequestCounts.Completed != 1 || batch.RequestCounts.Failed != 3 {
			t.Fatalf("batch: %+v", batch)
		}
		if out := readLines(t, c, batch.OutputFileID); len(out) != 1 || out["req-00"].Response == nil {
			t.Errorf("output: %+v", out)
		}
		errs := readLines(t, c, batch.ErrorFileID)
		for id, want := range map[string]string{"req-01": "tools", "req-02": "temperature", "req-03": "gpt-4o"} {
			l := errs[id]
			if l.Response == nil || (l.Response.StatusCode != 400 && l.Response.StatusCode != 404) || !strings.Contains(string(l.Response.Body), want) {
				t.Errorf("error line %s: %+v, want a 400 naming %s", id, l, want)
			}
		}
	})

	t.Run("BadFile", func(t *testing.T) {
		input := append(jsonl(t, 1, func(int) map[string]any { return chatBody(model, 2, "Hi.") }),
			[]byte("{\"custom_id\": \"x\", \"method\": \"GET\", \"url\": \"/v1/chat/completions\", \"body\": {}}\nnot json\n")...)
		batch := pollBatch(t, c, runBatch(t, c, input).ID, "final", finalStatus)
		if batch.Status != openai.BatchStatusFailed || len(batch.Errors.Data) != 2 || batch.Errors.Data[0].Line != 2 ||
			batch.Errors.Data[1].Line != 3 || !strings.Contains(batch.Errors.Data[0].Message, "method") || batch.FailedAt == 0 {
			t.Errorf("batch: %+v", batch)
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		// Line 0 is short, every other line runs until cancelled; the daemon runs one job at
		// a time in queue order, so the cancel finds line 0 finished and line 1 running.
		const n = 20
		input := jsonl(t, n, func(i int) map[string]any {
			if i == 0 {
				return chatBody(model, 2, "Hi.")
			}
			return chatBody(model, 32768, "Tell a very long story.")
		})
		batch := runBatch(t, c, input)
		pollBatch(t, c, batch.ID, "one request done", func(b *openai.Batch) bool { return b.RequestCounts.Completed >= 1 })
		cb, err := c.Batches.Cancel(ctx, batch.ID)
		if err != nil || cb.Status != openai.BatchStatusCancelling || cb.CancellingAt == 0 {
			t.Fatalf("cancel: %+v %v", cb, err)
		}
		batch = pollBatch(t, c, batch.ID, "final", finalStatus)
		if batch.Status != openai.BatchStatusCancelled || batch.RequestCounts.Completed != 1 || batch.CancelledAt == 0 {
			t.Fatalf("batch: %+v", batch)
		}
		out := readLines(t, c, batch.OutputFileID)
		errs := readLines(t, c, batch.ErrorFileID)
		if len(out) != 1 || out["req-00"].Response == nil || len(errs) != n-1 {
			t.Fatalf("output %d lines, errors %d lines; want 1 and %d", len(out), len(errs), n-1)
		}
		for id, l := range errs {
			if l.Error == nil || l.Error.Code != "batch_cancelled" {
				t.Errorf("error line %s: %+v", id, l)
			}
		}
		if _, err := c.Batches.Cancel(ctx, batch.ID); err == nil || !strings.Contains(err.Error(), "409") {
			t.Errorf("cancel a cancelled batch: %v, want 409", err)
		}
	})

	t.Run("ChatCompletion", func(t *testing.T) {
		params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(5), Temperature: openai.Float(0),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Say hello.")}}
		cc, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(cc.Choices) != 1 || cc.Usage.CompletionTokens < 1 || cc.Usage.CompletionTokens > 5 || cc.Model != model {
			t.Fatalf("completion: %+v", cc)
		}
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := c.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		// Greedy decoding of the same chat: the stream says what the plain call said.
		if chunks < 3 || len(acc.Choices) != 1 || acc.Choices[0].Message.Content != cc.Choices[0].Message.Content ||
			acc.Choices[0].FinishReason != cc.Choices[0].FinishReason || acc.Usage.CompletionTokens != cc.Usage.CompletionTokens {
			t.Errorf("stream (%d chunks): %+v\nplain: %+v", chunks, acc.ChatCompletion, cc)
		}
	})

	t.Run("ChatStreamSampled", func(t *testing.T) {
		// 200 sampled tokens with a seed: the streamed pieces put together are the text of
		// the same request not streamed. The daemon writes an entry per token
		// (REDLITE_STREAM_INTERVAL=0), so there is a chunk per token whose text is released.
		params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(200), Temperature: openai.Float(0.9), Seed: openai.Int(11),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a long story.")}}
		cc, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		stream := c.Chat.Completions.NewStreaming(ctx, params)
		var text strings.Builder
		pieces := 0
		var first time.Duration
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				if ch.Delta.Content != "" {
					if pieces == 0 {
						first = time.Since(start)
					}
					text.WriteString(ch.Delta.Content)
					pieces++
				}
			}
		}
		all := time.Since(start)
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text.String() != cc.Choices[0].Message.Content {
			t.Errorf("streamed %q\nplain    %q", text.String(), cc.Choices[0].Message.Content)
		}
		if cc.Usage.CompletionTokens != 200 || pieces < 100 {
			t.Errorf("%d tokens in %d chunks with text, want 200 in ≥ 100", cc.Usage.CompletionTokens, pieces)
		}
		// Logged, not asserted: when the first text came, against the whole.
		t.Logf("%d tokens, %d chunks with text; the first after %v, all after %v",
			cc.Usage.CompletionTokens, pieces, first.Round(100*time.Microsecond), all.Round(100*time.Microsecond))
	})

	t.Run("ChatErrors", func(t *testing.T) {
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, N: openai.Int(9),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi.")}})
		var apiErr *openai.Error
		if !asErr(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "n" || !strings.Contains(apiErr.Message, "between 1 and 8") {
			t.Errorf("n=9: %v", err)
		}
		_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi.")}})
		if !asErr(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" || !strings.Contains(apiErr.Message, model) {
			t.Errorf("unknown model: %v", err)
		}
		bad := sdk(b, "wrong")
		_, err = bad.Models.List(ctx)
		if !asErr(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || apiErr.Code != "invalid_api_key" {
			t.Errorf("wrong token: %v", err)
		}
	})

	t.Run("ListPages", func(t *testing.T) {
		// Newest first, one per page, each page after the last id of the one before.
		var ids []string
		iter := c.Batches.ListAutoPaging(ctx, openai.BatchListParams{Limit: openai.Int(1)})
		for iter.Next() {
			ids = append(ids, iter.Current().ID)
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		all, err := c.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(100)})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, b := range all.Data {
			want = append(want, b.ID)
		}
		if len(ids) != 4 || !slices.Equal(ids, want) || all.HasMore {
			t.Errorf("paged %q, all %q (has_more %v); want the 4 batches of this test", ids, want, all.HasMore)
		}
		if _, err := c.Batches.List(ctx, openai.BatchListParams{After: openai.String("batch_nope")}); err == nil || !strings.Contains(err.Error(), "400") {
			t.Errorf("after an unknown id: %v, want 400", err)
		}
	})

	t.Run("Models", func(t *testing.T) {
		var page *pagination.Page[openai.Model]
		var err error
		waitFor(t, "the worker listed", func() bool { page, err = c.Models.List(ctx); return err != nil || len(page.Data) > 0 })
		if err != nil || len(page.Data) != 1 || page.Data[0].ID != model || page.Data[0].Created < 1 {
			t.Fatalf("models: %+v %v", page, err)
		}
		m, err := c.Models.Get(ctx, model)
		if err != nil || m.ID != model || m.Created != page.Data[0].Created || m.Object != "model" {
			t.Errorf("model %s: %+v %v; listed %+v", model, m, err, page.Data[0])
		}
		var oe *openai.Error
		if _, err := c.Models.Get(ctx, "no-such-model"); !asErr(err, &oe) || oe.StatusCode != http.StatusNotFound || oe.Code != "model_not_found" {
			t.Errorf("unknown model: %v, want 404 model_not_found", err)
		}
	})
}

func asErr(err error, target **openai.Error) bool {
	e, ok := err.(*openai.Error)
	if ok {
		*target = e
	}
	return ok
}
