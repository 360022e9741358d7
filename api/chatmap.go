package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redlite/batch/jobs"
)

// ChatOptions are the parts of an OpenAI request that are not the job's payload.
type ChatOptions struct {
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
}

// ignoredFields are OpenAI parameters that change nothing here and are accepted so that
// tools which always send them work.
var ignoredFields = []string{"user", "store", "service_tier", "parallel_tool_calls", "safety_identifier", "prompt_cache_key"}

// refusedFields are OpenAI parameters of features the engine lacks.
var refusedFields = []string{"tools", "tool_choice", "functions", "function_call", "audio", "modalities",
	"prediction", "web_search_options", "reasoning_effort", "verbosity", "logit_bias"}

// textParams reads a route's own parameter k into g and o; handled is false for a
// parameter the route does not have.
type textParams func(k string, raw json.RawMessage, g *jobs.Generate, o *ChatOptions) (handled bool, err error)

// mapping is how the body of one OpenAI route (chat completions, completions, responses)
// becomes a generate payload: its own parameters, then those the routes share.
type mapping struct {
	params textParams
	// prompt is the parameter that holds the prompt, which the request must have.
	prompt string
	// rename maps the payload's field names in Validate's errors to the route's: the first
	// pair whose first name begins the field.
	rename [][2]string
	// format is the parameter that holds the response format: "" for response_format.
	format string
}

var chatMapping = mapping{params: chatParams, prompt: "messages"}

// ParseChatRequest maps an OpenAI chat completion request body onto a generate payload.
// Parameters of features we lack are refused with an OpenAI-shaped error naming the
// parameter, never dropped quietly, except those that change nothing (ignoredFields).
// response_format is enforced by the workers' grammar: a schema it cannot express is
// refused here, naming the keyword.
func ParseChatRequest(body []byte) (*jobs.Generate, ChatOptions, error) {
	return chatMapping.parse(body)
}

func chatParams(k string, raw json.RawMessage, g *jobs.Generate, o *ChatOptions) (bool, error) {
	var err error
	switch k {
	case "messages":
		g.Messages, err = chatMessages(raw)
	case "max_tokens", "max_completion_tokens":
		err = maxTokensParam(k, raw, g)
	case "n":
		err = unmarshalParam(k, raw, &g.N)
	case "logprobs":
		err = unmarshalParam(k, raw, &g.Logprobs)
	case "top_logprobs":
		err = unmarshalParam(k, raw, &g.TopLogprobs)
	case "response_format":
		g.ResponseFormat, err = responseFormat(raw)
	default:
		return false, nil
	}
	return true, err
}

// maxTokensParam reads a token limit, refusing two of them that differ.
func maxTokensParam(k string, raw json.RawMessage, g *jobs.Generate) error {
	var n int
	if err := unmarshalParam(k, raw, &n); err != nil {
		return err
	}
	if g.MaxTokens != nil && *g.MaxTokens != n {
		return badRequest(k, "max_tokens and max_completion_tokens differ (%d and %d); give one", *g.MaxTokens, n)
	}
	if n < 1 || n > jobs.MaxMaxTokens {
		return badRequest(k, "%s must be between 1 and %d, got %d", k, jobs.MaxMaxTokens, n)
	}
	g.MaxTokens = &n
	return nil
}

// sharedParams are the parameters every route maps the same way.
func sharedParams(k string, raw json.RawMessage, g *jobs.Generate, o *ChatOptions) (bool, error) {
	var err error
	switch k {
	case "model":
		err = unmarshalParam(k, raw, &g.Model)
	case "temperature":
		err = unmarshalParam(k, raw, &g.Temperature)
	case "top_p":
		err = unmarshalParam(k, raw, &g.TopP)
	case "top_k": // not OpenAI's; vLLM's and llama.cpp's name
		err = unmarshalParam(k, raw, &g.TopK)
	case "min_p":
		err = unmarshalParam(k, raw, &g.MinP)
	case "seed":
		err = unmarshalParam(k, raw, &g.Seed)
	case "stop":
		var one string
		if json.Unmarshal(raw, &one) == nil {
			g.Stop = []string{one}
		} else {
			err = unmarshalParam(k, raw, &g.Stop)
		}
	case "metadata":
		var m map[string]string
		if err = unmarshalParam(k, raw, &m); err == nil {
			g.Metadata = raw
		}
	case "stream":
		err = unmarshalParam(k, raw, &o.Stream)
	case "stream_options":
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		err = unmarshalParam(k, raw, &so)
		o.IncludeUsage = so.IncludeUsage
	case "frequency_penalty":
		err = unmarshalParam(k, raw, &g.FrequencyPenalty)
	case "presence_penalty":
		err = unmarshalParam(k, raw, &g.PresencePenalty)
	case "repetition_penalty": // vLLM's and llama.cpp's
		err = unmarshalParam(k, raw, &g.RepetitionPenalty)
	default:
		return false, nil
	}
	return true, err
}

// parse reads a request body: the route's parameters, the shared ones, then those that
// change nothing; anything else is refused by name. The payload is validated as the
// native API validates it, its errors naming the route's parameters.
func (m mapping) parse(body []byte) (*jobs.Generate, ChatOptions, error) {
	var opts ChatOptions
	var doc map[string]json.RawMessage
	if err := decodeJSON(body, &doc); err != nil {
		return nil, opts, err
	}
	if doc == nil {
		return nil, opts, badRequest("", "request body must be a JSON object, got null")
	}
	g := &jobs.Generate{Version: jobs.Version}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first problem reported does not depend on map order
	for _, k := range keys {
		raw := doc[k]
		if string(raw) == "null" {
			continue
		}
		handled, err := m.params(k, raw, g, &opts)
		if !handled {
			handled, err = sharedParams(k, raw, g, &opts)
		}
		if !handled {
			switch {
			case slices.Contains(ignoredFields, k):
			case slices.Contains(refusedFields, k):
				err = unsupported(k, "%s is not supported by this server", k)
			default:
				err = badRequest(k, "unknown parameter %q", clip(k))
			}
		}
		if err != nil {
			return nil, opts, err
		}
	}
	if p := doc[m.prompt]; p == nil || string(p) == "null" {
		return nil, opts, badRequest(m.prompt, "%s is required", m.prompt)
	}
	if so := doc["stream_options"]; so != nil && string(so) != "null" && !opts.Stream {
		return nil, opts, badRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	if err := g.Validate(); err != nil {
		var ve *jobs.ValidationError
		if !errors.As(err, &ve) {
			return nil, opts, err
		}
		field := ve.Field
		for _, r := range m.rename {
			if rest, ok := strings.CutPrefix(field, r[0]); ok {
				field = r[1] + rest
				break
			}
		}
		if strings.HasPrefix(ve.Field, "response_format") {
			format := cmp.Or(m.format, "response_format")
			// OpenAI names the top-level parameter; the message names the member and keyword.
			return nil, opts, badRequest(format, "%s: %s", field, ve.Msg)
		}
		if field != ve.Field {
			return nil, opts, &apiError{status: http.StatusBadRequest, typ: typeInvalid, code: "invalid_payload", param: field, msg: field + ": " + ve.Msg}
		}
		return nil, opts, err
	}
	return g, opts, nil
}

// responseFormat reads OpenAI's response_format strictly: a misspelt member would otherwise
// turn a schema into free text.
func responseFormat(raw json.RawMessage) (*jobs.ResponseFormat, error) {
	var rf jobs.ResponseFormat
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&rf); err != nil {
		return nil, badRequest("response_format", "response_format: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	return &rf, nil
}

func unsupported(param, format string, args ...any) *apiError {
	e := badRequest(param, format, args...)
	e.code = "unsupported_parameter"
	return e
}

func unmarshalParam(name string, raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return badRequest(name, "%s: %v", name, strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// chatMessages reads OpenAI messages: content as a string or as text parts.
func chatMessages(raw json.RawMessage) ([]jobs.Message, error) {
	var in []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, badRequest("messages", "messages must be an array of objects: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	out := make([]jobs.Message, 0, len(in))
	for i, m := range in {
		field := fmt.Sprintf("messages[%d]", i)
		var role string
		if err := unmarshalParam(field+".role", m["role"], &role); err != nil {
			return nil, err
		}
		role, err := messageRole(field+".role", role)
		if err != nil {
			return nil, err
		}
		for k := range m {
			switch k {
			case "role", "content", "name":
			case "tool_calls", "function_call", "audio", "refusal":
				return nil, unsupported(field+"."+k, "%s is not supported", k)
			default:
				return nil, badRequest(field+"."+k, "unknown message field %q", clip(k))
			}
		}
		text, err := textContent(field+".content", m["content"], "text")
		if err != nil {
			return nil, err
		}
		out = append(out, jobs.Message{Role: role, Content: text})
	}
	return out, nil
}

// messageRole maps an OpenAI role to the payload's: "developer" is the system role of
// newer models; tool messages are refused.
func messageRole(field, role string) (string, error) {
	switch role {
	case "developer":
		return jobs.RoleSystem, nil
	case jobs.RoleSystem, jobs.RoleUser, jobs.RoleAssistant:
		return role, nil
	case "tool", "function":
		return "", unsupported(field, "%s messages are not supported (no tool calling)", role)
	}
	return "", badRequest(field, "role must be system, developer, user or assistant, got %q", clip(role))
}

// textContent reads a message's content: a string, or parts of the given text types.
func textContent(field string, raw json.RawMessage, types ...string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", badRequest(field, "%s is required", field)
	}
	if raw[0] == '"' {
		var s string
		err := unmarshalParam(field, raw, &s)
		return s, err
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := unmarshalParam(field, raw, &parts); err != nil {
		return "", err
	}
	var b strings.Builder
	for i, p := range parts {
		if !slices.Contains(types, p.Type) || p.Text == nil {
			return "", unsupported(fmt.Sprintf("%s[%d].type", field, i), "only text content parts are supported, got %q", clip(p.Type))
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// ChatCompletion is OpenAI's chat.completion object.
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"` // "chat.completion"
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []ChatChoice `json:"choices"`
	Usage             ChatUsage    `json:"usage"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

// ChatChoice is one choice: index 0 to n-1.
type ChatChoice struct {
	Index        int              `json:"index"`
	Message      ChatReplyMessage `json:"message"`
	FinishReason string           `json:"finish_reason"`
	// Logprobs is null unless the request asked for logprobs.
	Logprobs *jobs.Logprobs `json:"logprobs"`
}

// ChatReplyMessage is the model's reply; reasoning_content carries a thinking model's
// reasoning, as other OpenAI-compatible servers name it.
type ChatReplyMessage struct {
	Role             string  `json:"role"`
	Content          string  `json:"content"`
	Refusal          *string `json:"refusal"`
	ReasoningContent string  `json:"reasoning_content,omitempty"`
}

// ChatUsage counts tokens as OpenAI does.
type ChatUsage struct {
	PromptTokens        int                `json:"prompt_tokens"`
	CompletionTokens    int                `json:"completion_tokens"`
	TotalTokens         int                `json:"total_tokens"`
	PromptTokensDetails PromptTokenDetails `json:"prompt_tokens_details"`
}

// PromptTokenDetails is OpenAI's usage.prompt_tokens_details: the prompt tokens that came
// from the worker's prefix cache.
type PromptTokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// chatUsage is a result's usage in OpenAI's shape.
func chatUsage(u jobs.Usage) ChatUsage {
	return ChatUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens,
		PromptTokensDetails: PromptTokenDetails{CachedTokens: u.CachedTokens}}
}

// completionOf is the chat.completion of a finished job.
func completionOf(jobID string, created time.Time, res jobs.Result) ChatCompletion {
	c := ChatCompletion{
		ID: "chatcmpl-" + jobID, Object: "chat.completion", Created: created.Unix(), Model: res.Model,
		Usage:             chatUsage(res.Usage),
		SystemFingerprint: "redlite-" + res.Worker,
	}
	for i, ch := range res.All() {
		c.Choices = append(c.Choices, ChatChoice{Index: i, Message: ChatReplyMessage{Role: jobs.RoleAssistant, Content: ch.Text, ReasoningContent: ch.Reasoning},
			FinishReason: string(ch.FinishReason), Logprobs: ch.Logprobs})
	}
	return c
}
