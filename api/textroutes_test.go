package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// TestOpenAITextRoutes drives /v1/completions, /v1/responses and n with the official Go
// SDK, unmodified, against the API and a real daemon on the tiny fixture model: live,
// streamed and as batch lines.
func TestOpenAITextRoutes(t *testing.T) {
	b := setup(t, setupOpts{})
	c := sdk(b, tokenA)
	ctx := context.Background()
	model := b.modelName()

	completion := func(t *testing.T, p openai.CompletionNewParams) *openai.Completion {
		t.Helper()
		p.Model = openai.CompletionNewParamsModel(model)
		cmpl, err := c.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return cmpl
	}
	prompt := openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}

	t.Run("Completion", func(t *testing.T) {
		cmpl := completion(t, openai.CompletionNewParams{Prompt: prompt, MaxTokens: openai.Int(8), Temperature: openai.Float(0), Logprobs: openai.Int(2)})
		if cmpl.Object != "text_completion" || !strings.HasPrefix(cmpl.ID, "cmpl-") || len(cmpl.Choices) != 1 || cmpl.Model != model {
			t.Fatalf("completion: %+v", cmpl)
		}
		ch, u := cmpl.Choices[0], cmpl.Usage
		if ch.Text == "" || ch.Index != 0 || (ch.FinishReason != "stop" && ch.FinishReason != "length") ||
			u.PromptTokens < 1 || u.CompletionTokens < 1 || u.CompletionTokens > 8 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("choice %+v, usage %+v", ch, u)
		}
		// The legacy logprobs: one entry per generated token, two alternatives each, the
		// offsets rising through the text.
		lp := ch.Logprobs
		n := int(u.CompletionTokens)
		if len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
			t.Fatalf("logprobs of %d tokens: %+v", n, lp)
		}
		for i := range n {
			if lp.TokenLogprobs[i] > 0 || len(lp.TopLogprobs[i]) < 1 || len(lp.TopLogprobs[i]) > 2 || i > 0 && lp.TextOffset[i] < lp.TextOffset[i-1] {
				t.Errorf("token %d: %q logprob %v, top %v, offset %v", i, lp.Tokens[i], lp.TokenLogprobs[i], lp.TopLogprobs[i], lp.TextOffset)
			}
		}
		// A raw prompt: the native job with the same prompt gives the same greedy text.
		job := b.submit(t, tokenA, map[string]any{"type": "generate", "version": 1, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}, http.StatusCreated)
		code, data := b.call(t, tokenA, "GET", "/v1/jobs/"+job.ID+"/result?wait=60s", nil)
		var res struct {
			Text string `json:"text"`
		}
		if code != http.StatusOK || json.Unmarshal(data, &res) != nil || res.Text != ch.Text {
			t.Errorf("native job on the same prompt: %d %s; completion %q", code, data, ch.Text)
		}
	})

	t.Run("CompletionStream", func(t *testing.T) {
		p := openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(model), Prompt: prompt, MaxTokens: openai.Int(120),
			Temperature: openai.Float(0.8), Seed: openai.Int(3)}
		whole := completion(t, p)
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := c.Completions.NewStreaming(ctx, p)
		var text strings.Builder
		var finish string
		var usage int64
		for stream.Next() {
			cur := stream.Current()
			for _, ch := range cur.Choices {
				text.WriteString(ch.Text)
				if ch.FinishReason != "" {
					finish = string(ch.FinishReason)
				}
			}
			usage = max(usage, cur.Usage.CompletionTokens)
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text.String() != whole.Choices[0].Text || finish != string(whole.Choices[0].FinishReason) || usage != whole.Usage.CompletionTokens {
			t.Errorf("streamed %q (%s, %d tokens)\nplain    %q (%s, %d tokens)", text.String(), finish, usage,
				whole.Choices[0].Text, whole.Choices[0].FinishReason, whole.Usage.CompletionTokens)
		}
	})

	t.Run("N", func(t *testing.T) {
		chat := func(n int64, temperature float64) *openai.ChatCompletion {
			t.Helper()
			cc, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, N: openai.Int(n), MaxTokens: openai.Int(12),
				Temperature: openai.Float(temperature), Seed: openai.Int(7),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story.")}})
			if err != nil {
				t.Fatal(err)
			}
			if len(cc.Choices) != int(n) {
				t.Fatalf("n=%d: %d choices", n, len(cc.Choices))
			}
			for i, ch := range cc.Choices {
				if ch.Index != int64(i) || ch.Message.Content == "" {
					t.Errorf("n=%d: choice %d: %+v", n, i, ch)
				}
			}
			return cc
		}
		one, three := chat(1, 1), chat(3, 1)
		texts := map[string]bool{}
		for _, ch := range three.Choices {
			texts[ch.Message.Content] = true
		}
		if len(texts) != 3 {
			t.Errorf("3 sampled choices, %d distinct texts: %+v", len(texts), three.Choices)
		}
		// Choice 0 is what the request without n gives for the seed; the prompt counts once.
		if three.Choices[0].Message.Content != one.Choices[0].Message.Content {
			t.Errorf("choice 0 %q, the request with n 1 %q", three.Choices[0].Message.Content, one.Choices[0].Message.Content)
		}
		if three.Usage.PromptTokens != one.Usage.PromptTokens || three.Usage.CompletionTokens < 3 ||
			three.Usage.TotalTokens != three.Usage.PromptTokens+three.Usage.CompletionTokens {
			t.Errorf("usage of n 3 %+v, of n 1 %+v", three.Usage, one.Usage)
		}
		greedy := chat(3, 0)
		for _, ch := range greedy.Choices[1:] {
			if ch.Message.Content != greedy.Choices[0].Message.Content {
				t.Errorf("greedy choices differ: %+v", greedy.Choices)
			}
		}
		// Streamed, choice 0 comes as it is generated and the others whole at the end: each
		// index's pieces put together are that choice's text.
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model, N: openai.Int(3), MaxTokens: openai.Int(12),
			Temperature: openai.Float(1), Seed: openai.Int(7), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story.")}})
		streamed := make([]string, 3)
		finished := 0
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				streamed[ch.Index] += ch.Delta.Content
				if ch.FinishReason != "" {
					finished++
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		for i, ch := range three.Choices {
			if streamed[i] != ch.Message.Content {
				t.Errorf("choice %d streamed %q, not streamed %q", i, streamed[i], ch.Message.Content)
			}
		}
		if finished != 3 {
			t.Errorf("%d finish reasons streamed, want 3", finished)
		}
		cmpl := completion(t, openai.CompletionNewParams{Prompt: prompt, MaxTokens: openai.Int(12), N: openai.Int(3), Temperature: openai.Float(1), Seed: openai.Int(7)})
		if len(cmpl.Choices) != 3 || cmpl.Choices[0].Text == cmpl.Choices[1].Text || cmpl.Choices[2].Index != 2 {
			t.Errorf("completion with n 3: %+v", cmpl.Choices)
		}
	})

	response := func(t *testing.T, p responses.ResponseNewParams) *responses.Response {
		t.Helper()
		p.Model = model
		r, err := c.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	t.Run("Response", func(t *testing.T) {
		r := response(t, responses.ResponseNewParams{Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me a story.")},
			Instructions: openai.String("Be brief."), MaxOutputTokens: openai.Int(16), Temperature: openai.Float(0)})
		if r.Object != "response" || !strings.HasPrefix(r.ID, "resp_") || r.OutputText() == "" ||
			(r.Status != responses.ResponseStatusCompleted && r.Status != responses.ResponseStatusIncomplete) ||
			r.Usage.InputTokens < 1 || r.Usage.OutputTokens < 1 || r.Usage.OutputTokens > 16 || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
			t.Fatalf("response: %+v", r)
		}
		if r.Status == responses.ResponseStatusIncomplete && r.IncompleteDetails.Reason != "max_output_tokens" {
			t.Errorf("incomplete for %q", r.IncompleteDetails.Reason)
		}
		// instructions and input are the chat's system and user messages.
		cc, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(16), Temperature: openai.Float(0),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Tell me a story.")}})
		if err != nil {
			t.Fatal(err)
		}
		if cc.Choices[0].Message.Content != r.OutputText() {
			t.Errorf("response %q, the same chat %q", r.OutputText(), cc.Choices[0].Message.Content)
		}
		// A message list reads the same.
		list := response(t, responses.ResponseNewParams{MaxOutputTokens: openai.Int(16), Temperature: openai.Float(0),
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
				responses.ResponseInputItemParamOfMessage("Be brief.", responses.EasyInputMessageRoleDeveloper),
				responses.ResponseInputItemParamOfMessage("Tell me a story.", responses.EasyInputMessageRoleUser)}}})
		if list.OutputText() != r.OutputText() {
			t.Errorf("input as messages %q, as instructions and a string %q", list.OutputText(), r.OutputText())
		}
	})

	t.Run("ResponseStream", func(t *testing.T) {
		p := responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me a story.")},
			MaxOutputTokens: openai.Int(120), Temperature: openai.Float(0.8), TopP: openai.Float(0.9)}
		stream := c.Responses.NewStreaming(ctx, p)
		var text strings.Builder
		var types []string
		var final responses.Response
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			switch ev.Type {
			case "response.output_text.delta":
				text.WriteString(ev.Delta)
			case "response.completed", "response.incomplete":
				final = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(types) < 8 || types[0] != "response.created" || types[1] != "response.in_progress" || types[2] != "response.output_item.added" {
			t.Errorf("events %v", types)
		}
		if text.String() == "" || text.String() != final.OutputText() || final.Usage.OutputTokens < 1 {
			t.Errorf("streamed %q, final response %q (%+v)", text.String(), final.OutputText(), final.Usage)
		}
	})

	t.Run("ResponseFormat", func(t *testing.T) {
		schema := map[string]any{"type": "object", "additionalProperties": false, "required": []string{"answer", "n"},
			"properties": map[string]any{"answer": map[string]any{"type": "string", "enum": []string{"yes", "no"}}, "n": map[string]any{"type": "integer", "minimum": 0, "maximum": 9}}}
		r := response(t, responses.ResponseNewParams{Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Is it raining?")},
			MaxOutputTokens: openai.Int(60), Temperature: openai.Float(1), Text: responses.ResponseTextConfigParam{
				Format: responses.ResponseFormatTextConfigUnionParam{OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "answer", Schema: schema, Strict: openai.Bool(true)}}}})
		var got struct {
			Answer *string `json:"answer"`
			N      *int    `json:"n"`
		}
		d := json.NewDecoder(strings.NewReader(r.OutputText()))
		d.DisallowUnknownFields()
		if r.Status != responses.ResponseStatusCompleted || d.Decode(&got) != nil || got.Answer == nil || (*got.Answer != "yes" && *got.Answer != "no") || got.N == nil || *got.N < 0 || *got.N > 9 {
			t.Errorf("%s response %q does not hold the schema", r.Status, r.OutputText())
		}
		schema["properties"].(map[string]any)["n"].(map[string]any)["multipleOf"] = 2
		_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")},
			Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "answer", Schema: schema}}}})
		var apiErr *openai.Error
		if !asErr(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "text.format" || !strings.Contains(apiErr.Message, `"multipleOf"`) {
			t.Errorf("a schema keyword the grammar lacks: %v", err)
		}
	})

	t.Run("Refusals", func(t *testing.T) {
		for _, tc := range []struct {
			name, path string
			body       map[string]any
			param      string
		}{
			{"TwoPrompts", "/v1/completions", map[string]any{"prompt": []string{"a", "b"}}, "prompt"},
			{"TokenPrompt", "/v1/completions", map[string]any{"prompt": []int{1, 2}}, "prompt"},
			{"Echo", "/v1/completions", map[string]any{"prompt": "a", "echo": true}, "echo"},
			{"NineCompletions", "/v1/completions", map[string]any{"prompt": "a", "n": 9}, "n"},
			{"NineChats", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "a"}}, "n": 9}, "n"},
			{"Tools", "/v1/responses", map[string]any{"input": "a", "tools": []any{}}, "tools"},
			{"PreviousResponse", "/v1/responses", map[string]any{"input": "a", "previous_response_id": "resp_1"}, "previous_response_id"},
			{"NoInput", "/v1/responses", map[string]any{"instructions": "a"}, "input"},
			{"FunctionCallItem", "/v1/responses", map[string]any{"input": []map[string]any{{"type": "function_call_output", "call_id": "x", "output": "y"}}}, "input[0].type"},
			{"LongOutput", "/v1/responses", map[string]any{"input": "a", "max_output_tokens": 1 << 20}, "max_output_tokens"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.body["model"] = model
				code, data := b.call(t, tokenA, "POST", tc.path, tc.body)
				var e struct {
					Error struct {
						Param   string `json:"param"`
						Message string `json:"message"`
					} `json:"error"`
				}
				if code != http.StatusBadRequest || json.Unmarshal(data, &e) != nil || e.Error.Param != tc.param || e.Error.Message == "" {
					t.Errorf("%d %s, want 400 naming %s", code, data, tc.param)
				}
			})
		}
	})

	t.Run("Batches", func(t *testing.T) {
		const n = 4
		for _, tc := range []struct {
			endpoint openai.BatchNewParamsEndpoint
			body     func(i int) map[string]any
			check    func(t *testing.T, body json.RawMessage, i int)
		}{
			{openai.BatchNewParamsEndpointV1Completions,
				func(i int) map[string]any {
					return map[string]any{"model": model, "prompt": fmt.Sprintf("Count to %d:", i), "max_tokens": 3 + i, "n": 1 + i%2, "temperature": 1}
				},
				func(t *testing.T, body json.RawMessage, i int) {
					var cmpl openai.Completion
					if err := json.Unmarshal(body, &cmpl); err != nil || cmpl.Object != "text_completion" || len(cmpl.Choices) != 1+i%2 ||
						cmpl.Choices[0].Text == "" || cmpl.Usage.CompletionTokens < 1 || cmpl.Usage.CompletionTokens > int64((3+i)*(1+i%2)) {
						t.Errorf("line %d: %s (%v)", i, body, err)
					}
				}},
			{openai.BatchNewParamsEndpointV1Responses,
				func(i int) map[string]any {
					return map[string]any{"model": model, "input": fmt.Sprintf("Count to %d.", i), "instructions": "Be brief.", "max_output_tokens": 3 + i}
				},
				func(t *testing.T, body json.RawMessage, i int) {
					var r responses.Response
					if err := json.Unmarshal(body, &r); err != nil || r.Object != "response" || r.OutputText() == "" || r.Usage.OutputTokens < 1 || r.Usage.OutputTokens > int64(3+i) {
						t.Errorf("line %d: %s (%v)", i, body, err)
					}
				}},
		} {
			t.Run(strings.TrimPrefix(string(tc.endpoint), "/v1/"), func(t *testing.T) {
				batch := runBatchOf(t, c, jsonlOf(t, string(tc.endpoint), n, tc.body), tc.endpoint)
				batch = pollBatch(t, c, batch.ID, "final", finalStatus)
				if batch.Status != openai.BatchStatusCompleted || batch.Endpoint != string(tc.endpoint) || batch.RequestCounts.Completed != n || batch.OutputFileID == "" {
					t.Fatalf("batch: %+v", batch)
				}
				lines := readLines(t, c, batch.OutputFileID)
				for i := range n {
					l, ok := lines[fmt.Sprintf("req-%02d", i)]
					if !ok || l.Response == nil || l.Response.StatusCode != 200 {
						t.Fatalf("line %d: %+v", i, l)
					}
					tc.check(t, l.Response.Body, i)
				}
			})
		}
		// A line for another endpoint than the batch's fails the batch, naming the line.
		input := jsonlOf(t, "/v1/completions", 1, func(int) map[string]any { return map[string]any{"prompt": "x"} })
		batch := runBatchOf(t, c, input, openai.BatchNewParamsEndpointV1Responses)
		batch = pollBatch(t, c, batch.ID, "final", finalStatus)
		if batch.Status != openai.BatchStatusFailed || len(batch.Errors.Data) != 1 || batch.Errors.Data[0].Code != "invalid_url" {
			t.Errorf("a completions line in a responses batch: %+v", batch)
		}
	})
}
