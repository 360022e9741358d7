package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/redlite/batch/jobs"
)

// longSystemPrompt is a system prompt of several of the worker's KV blocks (256 tokens).
func longSystemPrompt() string {
	var b strings.Builder
	for i := range 120 {
		fmt.Fprintf(&b, "Rule %d: answer in plain words about item %d. ", i, i*7)
	}
	return b.String()
}

// TestBatchCachedTokens runs a 3-line OpenAI batch whose lines share a long system prompt on
// a real daemon (a batching worker, prefix cache on by default): the line that runs first
// reads the system prompt, the other two start from its blocks, and the output file says so
// in usage.prompt_tokens_details.cached_tokens; the batch's usage sums them in
// input_tokens_details. A native job with the same system prompt afterwards reports
// usage.cached_tokens.
func TestBatchCachedTokens(t *testing.T) {
	b := setup(t, setupOpts{})
	c := sdk(b, tokenA)
	model := b.modelName()
	system := longSystemPrompt()
	input := jsonl(t, 3, func(i int) map[string]any {
		return map[string]any{"model": model, "max_tokens": 3, "temperature": 0,
			"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": fmt.Sprintf("Question %d?", i)}}}
	})
	batch := runBatch(t, c, input)
	batch = pollBatch(t, c, batch.ID, "final", finalStatus)
	if batch.Status != openai.BatchStatusCompleted || batch.RequestCounts.Completed != 3 {
		t.Fatalf("batch: %+v", batch)
	}
	var hits, cached int64
	for id, l := range readLines(t, c, batch.OutputFileID) {
		if l.Response == nil {
			t.Fatalf("line %s: %+v", id, l)
		}
		var cc openai.ChatCompletion
		if err := json.Unmarshal(l.Response.Body, &cc); err != nil {
			t.Fatal(err)
		}
		n := cc.Usage.PromptTokensDetails.CachedTokens
		if !strings.Contains(string(l.Response.Body), `"prompt_tokens_details":{"cached_tokens":`) || n < 0 || n >= cc.Usage.PromptTokens || n%256 != 0 {
			t.Errorf("line %s: %d cached of %d prompt tokens: %s", id, n, cc.Usage.PromptTokens, l.Response.Body)
		}
		if n > 0 {
			hits++
		}
		cached += n
	}
	if hits != 2 || cached < 2*256 {
		t.Errorf("%d lines started from the cache (%d tokens), want the 2 after the first", hits, cached)
	}
	if batch.Usage.InputTokensDetails.CachedTokens != cached {
		t.Errorf("batch usage %+v, want %d cached input tokens", batch.Usage, cached)
	}

	v := b.submit(t, tokenA, map[string]any{"type": "generate", "version": 1, "temperature": 0, "max_tokens": 2,
		"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": "One more?"}}}, http.StatusCreated)
	code, data := b.call(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/result?wait=60s", nil)
	var res jobs.Result
	if code != http.StatusOK || json.Unmarshal(data, &res) != nil {
		t.Fatalf("result: %d %s", code, data)
	}
	if res.Usage.CachedTokens < 256 || res.Usage.CachedTokens >= res.Usage.PromptTokens || !strings.Contains(string(data), `"cached_tokens":`) {
		t.Errorf("native result usage %+v: %s", res.Usage, data)
	}
}
