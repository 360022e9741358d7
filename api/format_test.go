package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/redlite/batch/grammar/grammartest"
	"github.com/redlite/batch/jobs"
)

// orderSchema is a nested schema (objects in an array, enums, required, numbers, strings
// with patterns) shared with the Node test; its strings are bounded, so that the
// random-weight fixture's output ends well within max_tokens.
func orderSchema(t *testing.T) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "order.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStructuredOutputs: with the official Go SDK on the random-weight fixture, whose free
// output is noise, a json_schema chat completion and a batch of 20 sampled lines give
// documents valid against the schema (grammartest, written apart from the grammar);
// logprobs come back in OpenAI's shape and equal the job's result (which the daemon's
// TestResponseFormat ties to the engine); an unsupported keyword is a 400 naming it, on the
// chat route, in a batch line and on the native route.
func TestStructuredOutputs(t *testing.T) {
	b := setup(t, setupOpts{})
	c := sdk(b, tokenA)
	ctx := context.Background()
	model := b.modelName()
	schema := orderSchema(t)
	format := func(s json.RawMessage) map[string]any {
		return map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "order", "strict": true, "schema": s}}
	}

	t.Run("Chat", func(t *testing.T) {
		var sch map[string]any
		if err := json.Unmarshal(schema, &sch); err != nil {
			t.Fatal(err)
		}
		params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(400),
			Temperature: openai.Float(1), Seed: openai.Int(7), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(3),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("An order as JSON.")},
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "order", Strict: openai.Bool(true), Schema: sch}}}}
		cc, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		ch := cc.Choices[0]
		if err := grammartest.Validate(schema, []byte(ch.Message.Content)); err != nil || ch.FinishReason != "stop" {
			t.Fatalf("%q (finish %s): %v", ch.Message.Content, ch.FinishReason, err)
		}
		lp := ch.Logprobs.Content
		if int64(len(lp)) != cc.Usage.CompletionTokens {
			t.Fatalf("%d logprobs for %d tokens", len(lp), cc.Usage.CompletionTokens)
		}
		var text []byte
		for _, l := range lp {
			for _, by := range l.Bytes {
				text = append(text, byte(by))
			}
			if len(l.TopLogprobs) < 1 || len(l.TopLogprobs) > 3 || l.Logprob > 0 {
				t.Errorf("token %q: logprob %v, %d alternatives", l.Token, l.Logprob, len(l.TopLogprobs))
			}
		}
		if string(text) != ch.Message.Content {
			t.Errorf("the tokens' bytes spell %q, the content is %q", text, ch.Message.Content)
		}
		// The same numbers as the job's result on the native API.
		code, data := b.call(t, tokenA, "GET", "/v1/jobs/"+strings.TrimPrefix(cc.ID, "chatcmpl-")+"/result", nil)
		var res jobs.Result
		if code != http.StatusOK || json.Unmarshal(data, &res) != nil || res.Logprobs == nil || len(res.Logprobs.Content) != len(lp) {
			t.Fatalf("job result: %d %s", code, data)
		}
		for i, want := range res.Logprobs.Content {
			got := lp[i]
			if got.Token != want.Token || got.Logprob != want.Logprob || len(got.TopLogprobs) != len(want.TopLogprobs) {
				t.Fatalf("token %d: chat %+v, job %+v", i, got, want)
			}
			for j := range want.TopLogprobs {
				if got.TopLogprobs[j].Logprob != want.TopLogprobs[j].Logprob || got.TopLogprobs[j].Token != want.TopLogprobs[j].Token {
					t.Fatalf("token %d alternative %d: chat %+v, job %+v", i, j, got.TopLogprobs[j], want.TopLogprobs[j])
				}
			}
		}
		t.Logf("%s (%d tokens)", ch.Message.Content, cc.Usage.CompletionTokens)

		// Streamed, the same seed gives the same text and logprobs.
		stream := c.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != ch.Message.Content || len(acc.Choices[0].Logprobs.Content) != len(lp) {
			t.Fatalf("stream: %+v", acc.ChatCompletion)
		}
		for i, got := range acc.Choices[0].Logprobs.Content {
			if got.Token != lp[i].Token || got.Logprob != lp[i].Logprob {
				t.Fatalf("stream token %d: %+v, plain %+v", i, got, lp[i])
			}
		}
	})

	t.Run("Batch", func(t *testing.T) {
		const n = 20
		input := jsonl(t, n, func(i int) map[string]any {
			body := chatBody(model, 400, fmt.Sprintf("Order %d as JSON.", i))
			body["temperature"], body["seed"], body["response_format"] = 1, i, format(schema)
			body["presence_penalty"], body["top_k"], body["min_p"] = 0.5, 40, 0.01
			return body
		})
		batch := pollBatch(t, c, runBatch(t, c, input).ID, "final", finalStatus)
		if batch.Status != openai.BatchStatusCompleted || batch.RequestCounts.Completed != n {
			t.Fatalf("batch: %+v", batch)
		}
		lines := readLines(t, c, batch.OutputFileID)
		for i := range n {
			l := lines[fmt.Sprintf("req-%02d", i)]
			var cc openai.ChatCompletion
			if l.Response == nil || json.Unmarshal(l.Response.Body, &cc) != nil || len(cc.Choices) != 1 {
				t.Fatalf("line %d: %+v", i, l)
			}
			text := cc.Choices[0].Message.Content
			if err := grammartest.Validate(schema, []byte(text)); err != nil || cc.Choices[0].FinishReason != "stop" {
				t.Errorf("line %d: %q (finish %s): %v", i, text, cc.Choices[0].FinishReason, err)
			}
		}
	})

	t.Run("Unsupported", func(t *testing.T) {
		bad := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","multipleOf":3}}}`)
		var sch map[string]any
		json.Unmarshal(bad, &sch)
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi.")},
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "n", Schema: sch}}}})
		var apiErr *openai.Error
		if !asErr(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "response_format" ||
			apiErr.Type != "invalid_request_error" || !strings.Contains(apiErr.Message, `keyword "multipleOf" is not supported`) {
			t.Errorf("multipleOf on the chat route: %v", err)
		}
		// A batch line: that line fails with the same message, the others run.
		input := jsonl(t, 2, func(i int) map[string]any {
			body := chatBody(model, 3, "Hi.")
			if i == 1 {
				body["response_format"] = format(bad)
			}
			return body
		})
		batch := pollBatch(t, c, runBatch(t, c, input).ID, "final", finalStatus)
		if batch.RequestCounts.Completed != 1 || batch.RequestCounts.Failed != 1 || batch.ErrorFileID == "" {
			t.Fatalf("batch: %+v", batch)
		}
		if l := readLines(t, c, batch.ErrorFileID)["req-01"]; l.Response == nil || l.Response.StatusCode != http.StatusBadRequest ||
			!strings.Contains(string(l.Response.Body), `keyword \"multipleOf\" is not supported`) {
			t.Errorf("error line: %+v", l)
		}
		// The native route.
		code, data := b.call(t, tokenA, "POST", "/v1/jobs", map[string]any{"type": "generate", "version": 1, "prompt": "x",
			"response_format": format(bad)})
		var e struct{ Error errorFields }
		json.Unmarshal(data, &e)
		if code != http.StatusBadRequest || e.Error.Param != "response_format.json_schema.schema" || !strings.Contains(e.Error.Message, `"multipleOf"`) {
			t.Errorf("native: %d %s", code, data)
		}
	})

	t.Run("NoLogprobs", func(t *testing.T) {
		cc, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(3),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi.")}})
		if err != nil || !reflect.ValueOf(cc.Choices[0].Logprobs.Content).IsNil() || cc.Choices[0].Logprobs.JSON.Content.Valid() {
			t.Errorf("logprobs not asked for: %+v %v", cc.Choices[0].Logprobs, err)
		}
	})
}

type errorFields struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param"`
	Code    string `json:"code"`
}
