package api

import (
	"time"

	"github.com/redlite/batch/jobs"
)

// The stream events of the text routes (textStream). The job's progress carries the first
// completion's text, so that one streams as it is generated; the other completions of a
// request with n > 1 come whole when the job is done, each in its own events (index i),
// as OpenAI's streams interleave choices.

func streamError(sse *sseStream, e *apiError) {
	code := e.code
	sse.event("", errorBody{Error: Error{Message: e.msg, Type: e.typ, Code: &code}})
}

// chatStream writes chat.completion.chunk events.
type chatStream struct {
	sse     *sseStream
	id      string
	created int64
	model   string
	usage   bool
}

func newChatStream(sse *sseStream, jobID string, g *jobs.Generate, o ChatOptions) textStream {
	return &chatStream{sse: sse, id: "chatcmpl-" + jobID, created: time.Now().Unix(), model: g.Model, usage: o.IncludeUsage}
}

func (c *chatStream) chunk(index int, delta map[string]any, finish *string, usage *ChatUsage, lp *jobs.Logprobs) {
	choices := []map[string]any{}
	if delta != nil {
		choices = append(choices, map[string]any{"index": index, "delta": delta, "finish_reason": finish, "logprobs": lp})
	}
	m := map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model, "choices": choices}
	if usage != nil {
		m["usage"] = usage
	}
	c.sse.event("", m)
}

func chatDelta(text, reasoning string) map[string]any {
	m := map[string]any{"content": text}
	if reasoning != "" {
		m["reasoning_content"] = reasoning
	}
	return m
}

func (c *chatStream) start() {
	c.chunk(0, map[string]any{"role": jobs.RoleAssistant, "content": ""}, nil, nil, nil)
}

func (c *chatStream) text(d delta) { c.chunk(0, chatDelta(d.Text, d.Reasoning), nil, nil, nil) }

func (c *chatStream) done(res jobs.Result, rest delta) {
	c.model = res.Model
	for i, ch := range res.All() {
		finish := string(ch.FinishReason)
		switch {
		case i > 0:
			d := chatDelta(ch.Text, ch.Reasoning)
			d["role"] = jobs.RoleAssistant
			c.chunk(i, d, nil, nil, ch.Logprobs)
		case !rest.empty() || ch.Logprobs != nil:
			// The logprobs are only in the result: they come with the last piece of text.
			c.chunk(0, chatDelta(rest.Text, rest.Reasoning), nil, nil, ch.Logprobs)
		}
		c.chunk(i, map[string]any{}, &finish, nil, nil)
	}
	if c.usage {
		u := chatUsage(res.Usage)
		c.chunk(0, nil, nil, &u, nil)
	}
	c.sse.event("", "[DONE]")
}

func (c *chatStream) fail(e *apiError) { streamError(c.sse, e) }

// completionStream writes text_completion events, as the completions route streams.
type completionStream struct {
	sse     *sseStream
	id      string
	created int64
	model   string
	usage   bool
}

func newCompletionStream(sse *sseStream, jobID string, g *jobs.Generate, o ChatOptions) textStream {
	return &completionStream{sse: sse, id: textCompletionID(jobID), created: time.Now().Unix(), model: g.Model, usage: o.IncludeUsage}
}

func (c *completionStream) chunk(choices []TextChoice, usage *ChatUsage) {
	m := map[string]any{"id": c.id, "object": "text_completion", "created": c.created, "model": c.model, "choices": choices}
	if usage != nil {
		m["usage"] = usage
	}
	c.sse.event("", m)
}

// streamedChoice is a choice of a chunk: finish_reason null until the last.
type streamedChoice struct {
	Text         string          `json:"text"`
	Index        int             `json:"index"`
	Logprobs     *LegacyLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

func (c *completionStream) send(ch streamedChoice) {
	c.sse.event("", map[string]any{"id": c.id, "object": "text_completion", "created": c.created, "model": c.model,
		"choices": []streamedChoice{ch}})
}

func (c *completionStream) start() {}

func (c *completionStream) text(d delta) { c.send(streamedChoice{Text: d.Text}) }

func (c *completionStream) done(res jobs.Result, rest delta) {
	c.model = res.Model
	for i, ch := range res.All() {
		text := ch.Text
		if i == 0 {
			text = rest.Text
		}
		finish := string(ch.FinishReason)
		c.send(streamedChoice{Text: text, Index: i, Logprobs: legacyLogprobs(ch.Logprobs), FinishReason: &finish})
	}
	if c.usage {
		u := chatUsage(res.Usage)
		c.chunk([]TextChoice{}, &u)
	}
	c.sse.event("", "[DONE]")
}

func (c *completionStream) fail(e *apiError) { streamError(c.sse, e) }

// responseStream writes the responses route's typed events: response.created, the output
// item and its text part, a response.output_text.delta per piece, their done events and
// response.completed (response.incomplete at max_output_tokens).
type responseStream struct {
	sse     *sseStream
	jobID   string
	created time.Time
	model   string
	seq     int
}

func newResponseStream(sse *sseStream, jobID string, g *jobs.Generate, _ ChatOptions) textStream {
	return &responseStream{sse: sse, jobID: jobID, created: time.Now(), model: g.Model}
}

func (c *responseStream) event(typ string, fields map[string]any) {
	fields["type"], fields["sequence_number"] = typ, c.seq
	c.seq++
	c.sse.event(typ, fields)
}

// part addresses the one text part of the one output item.
func (c *responseStream) part(fields map[string]any) map[string]any {
	fields["item_id"], fields["output_index"], fields["content_index"] = messageID(c.jobID), 0, 0
	return fields
}

func (c *responseStream) start() {
	r := responseOf(c.jobID, c.created, nil, c.model)
	c.event("response.created", map[string]any{"response": r})
	c.event("response.in_progress", map[string]any{"response": r})
	item := responseMessage(c.jobID, "in_progress", "")
	item.Content = []ResponseOut{}
	c.event("response.output_item.added", map[string]any{"output_index": 0, "item": item})
	c.event("response.content_part.added", c.part(map[string]any{"part": ResponseOut{Type: "output_text", Annotations: []any{}}}))
}

func (c *responseStream) text(d delta) {
	if d.Text != "" {
		c.event("response.output_text.delta", c.part(map[string]any{"delta": d.Text, "logprobs": []any{}}))
	}
}

func (c *responseStream) done(res jobs.Result, rest delta) {
	c.text(rest)
	r := responseOf(c.jobID, c.created, &res, res.Model)
	item := r.Output[0]
	c.event("response.output_text.done", c.part(map[string]any{"text": res.Text, "logprobs": []any{}}))
	c.event("response.content_part.done", c.part(map[string]any{"part": item.Content[0]}))
	c.event("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	end := "response.completed"
	if r.Status == "incomplete" {
		end = "response.incomplete"
	}
	c.event(end, map[string]any{"response": r})
}

func (c *responseStream) fail(e *apiError) {
	c.event("error", map[string]any{"code": e.code, "message": e.msg, "param": nilIfEmpty(e.param)})
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
