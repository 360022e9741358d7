package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redlite/batch/jobs"
)

// The completions and responses routes: text in, text out, the subset a batch needs. Their
// bodies map onto the generate payload through the chat route's mapping (chatmap.go), with
// their own parameters only where they differ.

var completionMapping = mapping{params: completionParams, prompt: "prompt",
	rename: [][2]string{{"top_logprobs", "logprobs"}}}

// ParseCompletionRequest maps an OpenAI (legacy) completion request body onto a generate
// payload with a raw prompt: no chat template.
func ParseCompletionRequest(body []byte) (*jobs.Generate, ChatOptions, error) {
	return completionMapping.parse(body)
}

func completionParams(k string, raw json.RawMessage, g *jobs.Generate, o *ChatOptions) (bool, error) {
	var err error
	switch k {
	case "prompt":
		g.Prompt, err = completionPrompt(raw)
	case "max_tokens":
		err = maxTokensParam(k, raw, g)
	case "n":
		err = unmarshalParam(k, raw, &g.N)
	case "logprobs":
		// The legacy form: how many alternatives to list, the chosen token's always.
		var n int
		if err = unmarshalParam(k, raw, &n); err == nil {
			g.Logprobs, g.TopLogprobs = ptrTo(true), &n
		}
	case "echo":
		var echo bool
		if err = unmarshalParam(k, raw, &echo); err == nil && echo {
			err = unsupported(k, "echo is not supported: the answer is the completion alone")
		}
	case "suffix":
		var suffix string
		if err = unmarshalParam(k, raw, &suffix); err == nil && suffix != "" {
			err = unsupported(k, "suffix is not supported (no insertion)")
		}
	case "best_of":
		var n int
		if err = unmarshalParam(k, raw, &n); err == nil && n != 1 {
			err = unsupported(k, "best_of must be 1: every completion generated is returned; ask for n")
		}
	case "response_format": // not the legacy route's; vLLM's extension
		g.ResponseFormat, err = responseFormat(raw)
	default:
		return false, nil
	}
	return true, err
}

func ptrTo[T any](v T) *T { return &v }

// completionPrompt reads prompt: a string, or a list of one string. Several prompts, or
// token ids, are refused: one request is one job.
func completionPrompt(raw json.RawMessage) (string, error) {
	var one string
	if json.Unmarshal(raw, &one) != nil {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return "", badRequest("prompt", "prompt must be a string or a list of one string")
		}
		if len(list) != 1 {
			return "", unsupported("prompt", "prompt must be one string, got a list of %d; send each prompt as its own request or batch line", len(list))
		}
		if err := json.Unmarshal(list[0], &one); err != nil {
			return "", unsupported("prompt", "prompt must be text; token ids are not supported")
		}
	}
	if one == "" {
		return "", badRequest("prompt", "prompt must not be empty")
	}
	return one, nil
}

// TextCompletion is OpenAI's text_completion object.
type TextCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"` // "text_completion"
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []TextChoice `json:"choices"`
	Usage             ChatUsage    `json:"usage"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

// TextChoice is one completion.
type TextChoice struct {
	Text  string `json:"text"`
	Index int    `json:"index"`
	// Logprobs is null unless the request asked for logprobs.
	Logprobs     *LegacyLogprobs `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// LegacyLogprobs is the completions route's logprobs: parallel lists per token, the
// alternatives as a map from token text to logprob, and each token's offset in the text
// in characters.
type LegacyLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

func legacyLogprobs(lp *jobs.Logprobs) *LegacyLogprobs {
	if lp == nil {
		return nil
	}
	out := &LegacyLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	var text []byte
	for _, t := range lp.Content {
		out.Tokens = append(out.Tokens, t.Token)
		out.TokenLogprobs = append(out.TokenLogprobs, t.Logprob)
		top := make(map[string]float64, len(t.TopLogprobs))
		for _, a := range t.TopLogprobs {
			top[a.Token] = a.Logprob
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, utf8.RuneCount(text))
		for _, b := range t.Bytes {
			text = append(text, byte(b))
		}
	}
	return out
}

func textCompletionID(jobID string) string { return "cmpl-" + jobID }

// textCompletionOf is the text_completion of a finished job.
func textCompletionOf(jobID string, created time.Time, res jobs.Result) any {
	c := TextCompletion{ID: textCompletionID(jobID), Object: "text_completion", Created: created.Unix(), Model: res.Model,
		Usage: chatUsage(res.Usage), SystemFingerprint: "redlite-" + res.Worker}
	for i, ch := range res.All() {
		c.Choices = append(c.Choices, TextChoice{Text: ch.Text, Index: i, Logprobs: legacyLogprobs(ch.Logprobs), FinishReason: string(ch.FinishReason)})
	}
	return c
}

var responseMapping = mapping{params: responseParams, prompt: "input", format: "text.format",
	rename: [][2]string{{"messages", "input"}, {"max_tokens", "max_output_tokens"},
		{"response_format.json_schema.", "text.format."}, {"response_format", "text.format"}}}

// ParseResponseRequest maps an OpenAI responses request body onto a generate payload: the
// input (and instructions, as the system message) as a chat.
func ParseResponseRequest(body []byte) (*jobs.Generate, ChatOptions, error) {
	return responseMapping.parse(body)
}

// refusedResponseFields are the responses route's parameters of features we lack.
var refusedResponseFields = []string{"previous_response_id", "conversation", "reasoning", "background", "include", "prompt", "max_tool_calls", "top_logprobs"}

func responseParams(k string, raw json.RawMessage, g *jobs.Generate, o *ChatOptions) (bool, error) {
	var err error
	switch k {
	case "input":
		var in []jobs.Message
		if in, err = responseInput(raw); err == nil {
			g.Messages = append(g.Messages, in...)
		}
	case "instructions":
		var sys string
		if err = unmarshalParam(k, raw, &sys); err == nil && sys != "" {
			// The system message comes first; an input's own system message follows it.
			if len(g.Messages) > 0 && g.Messages[0].Role == jobs.RoleSystem {
				g.Messages[0].Content = sys + "\n\n" + g.Messages[0].Content
			} else {
				g.Messages = append([]jobs.Message{{Role: jobs.RoleSystem, Content: sys}}, g.Messages...)
			}
		}
	case "max_output_tokens":
		err = maxTokensParam(k, raw, g)
	case "text":
		g.ResponseFormat, err = responseText(raw)
	case "truncation":
		var t string
		if err = unmarshalParam(k, raw, &t); err == nil && t != "disabled" {
			err = unsupported(k, `truncation must be "disabled": a prompt too long for the model is refused, never cut`)
		}
	case "stop", "n", "stream_options":
		// Not the responses route's parameters; the shared mapping would take them.
		err = badRequest(k, "unknown parameter %q", k)
	default:
		if !slices.Contains(refusedResponseFields, k) {
			return false, nil
		}
		err = unsupported(k, "%s is not supported by this server", k)
	}
	return true, err
}

// responseInput reads input: a string (one user message) or a list of messages whose
// content is a string or input_text/output_text parts.
func responseInput(raw json.RawMessage) ([]jobs.Message, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := unmarshalParam("input", raw, &s); err != nil {
			return nil, err
		}
		return []jobs.Message{{Role: jobs.RoleUser, Content: s}}, nil
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input", "input must be a string or a list of messages")
	}
	out := make([]jobs.Message, 0, len(items))
	for i, it := range items {
		field := fmt.Sprintf("input[%d]", i)
		if t, ok := it["type"]; ok {
			var typ string
			if err := unmarshalParam(field+".type", t, &typ); err != nil {
				return nil, err
			}
			if typ != "message" {
				return nil, unsupported(field+".type", "only message items are supported, got %q", clip(typ))
			}
		}
		for k := range it {
			switch k {
			case "type", "role", "content", "id", "status":
			default:
				return nil, badRequest(field+"."+k, "unknown input item field %q", clip(k))
			}
		}
		var role string
		if err := unmarshalParam(field+".role", it["role"], &role); err != nil {
			return nil, err
		}
		role, err := messageRole(field+".role", role)
		if err != nil {
			return nil, err
		}
		text, err := textContent(field+".content", it["content"], "input_text", "output_text")
		if err != nil {
			return nil, err
		}
		out = append(out, jobs.Message{Role: role, Content: text})
	}
	return out, nil
}

// responseText reads the text parameter: its format, flat as the responses route has it
// ({"type": "json_schema", "name", "schema", "strict"}), becomes the payload's
// response_format.
func responseText(raw json.RawMessage) (*jobs.ResponseFormat, error) {
	var text struct {
		Format    json.RawMessage `json:"format"`
		Verbosity *string         `json:"verbosity"`
	}
	if err := strictParam("text", raw, &text); err != nil {
		return nil, err
	}
	if text.Verbosity != nil && *text.Verbosity != "medium" {
		return nil, unsupported("text.verbosity", "text.verbosity is not supported")
	}
	if len(text.Format) == 0 || string(text.Format) == "null" {
		return nil, nil
	}
	var f struct {
		Type        string          `json:"type"`
		Name        string          `json:"name,omitempty"`
		Description string          `json:"description,omitempty"`
		Schema      json.RawMessage `json:"schema,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	}
	if err := strictParam("text.format", text.Format, &f); err != nil {
		return nil, err
	}
	rf := &jobs.ResponseFormat{Type: f.Type}
	if f.Type == jobs.FormatJSONSchema || f.Name != "" || f.Schema != nil || f.Strict != nil || f.Description != "" {
		rf.JSONSchema = &jobs.JSONSchema{Name: f.Name, Description: f.Description, Schema: f.Schema, Strict: f.Strict}
	}
	return rf, nil
}

// strictParam decodes raw into v, refusing members v does not have: a misspelt member
// would otherwise turn a schema into free text.
func strictParam(name string, raw json.RawMessage, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return badRequest(name, "%s: %v", name, strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// Response is OpenAI's response object, as far as a text answer fills it.
type Response struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"` // "response"
	CreatedAt         int64              `json:"created_at"`
	Status            string             `json:"status"` // completed, incomplete (max_output_tokens)
	Error             *Error             `json:"error"`
	IncompleteDetails *IncompleteDetails `json:"incomplete_details"`
	Model             string             `json:"model"`
	Output            []ResponseMessage  `json:"output"`
	ParallelToolCalls bool               `json:"parallel_tool_calls"`
	ToolChoice        string             `json:"tool_choice"` // "none"
	Tools             []any              `json:"tools"`
	Usage             *ResponseUsage     `json:"usage"`
}

// IncompleteDetails says why a response stopped short.
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// ResponseMessage is the output message item.
type ResponseMessage struct {
	Type    string        `json:"type"` // "message"
	ID      string        `json:"id"`
	Status  string        `json:"status"`
	Role    string        `json:"role"`
	Content []ResponseOut `json:"content"`
}

// ResponseOut is an output_text content part.
type ResponseOut struct {
	Type        string `json:"type"` // "output_text"
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

// ResponseUsage counts tokens as the responses route does.
type ResponseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

func responseID(jobID string) string { return "resp_" + jobID }
func messageID(jobID string) string  { return "msg_" + jobID }

// responseOf is the response object of a finished job; res nil is the response while the
// job runs (a stream's first events).
func responseOf(jobID string, created time.Time, res *jobs.Result, model string) Response {
	r := Response{ID: responseID(jobID), Object: "response", CreatedAt: created.Unix(), Status: "in_progress", Model: model,
		Output: []ResponseMessage{}, ToolChoice: "none", Tools: []any{}}
	if res == nil {
		return r
	}
	r.Status, r.Model = "completed", res.Model
	status := "completed"
	if res.FinishReason == jobs.FinishLength {
		r.Status, status = "incomplete", "incomplete"
		r.IncompleteDetails = &IncompleteDetails{Reason: "max_output_tokens"}
	}
	r.Output = []ResponseMessage{responseMessage(jobID, status, res.Text)}
	u := ResponseUsage{InputTokens: res.Usage.PromptTokens, OutputTokens: res.Usage.CompletionTokens, TotalTokens: res.Usage.TotalTokens}
	u.InputTokensDetails.CachedTokens = res.Usage.CachedTokens
	r.Usage = &u
	return r
}

func responseMessage(jobID, status, text string) ResponseMessage {
	return ResponseMessage{Type: "message", ID: messageID(jobID), Status: status, Role: jobs.RoleAssistant,
		Content: []ResponseOut{{Type: "output_text", Text: text, Annotations: []any{}}}}
}
