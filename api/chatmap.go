package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redlite/batch/jobs"
)

// ChatOptions are the parts of an OpenAI chat request that are not the job's payload.
type ChatOptions struct {
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
}

// ignoredChatFields are OpenAI parameters that change nothing here and are accepted so that
// tools which always send them work.
var ignoredChatFields = []string{"user", "store", "service_tier", "parallel_tool_calls", "safety_identifier", "prompt_cache_key"}

// refusedChatFields are OpenAI parameters of features the engine lacks.
var refusedChatFields = []string{"tools", "tool_choice", "functions", "function_call", "audio", "modalities",
	"prediction", "web_search_options", "reasoning_effort", "verbosity", "logit_bias"}

// ParseChatRequest maps an OpenAI chat completion request body onto a generate payload.
// Parameters of features we lack are refused with an OpenAI-shaped error naming the
// parameter, never dropped quietly, except those that change nothing (ignoredChatFields)
// and neutral values (n 1). response_format is enforced by the workers' grammar: a schema
// it cannot express is refused here, naming the keyword.
func ParseChatRequest(body []byte) (*jobs.Generate, ChatOptions, error) {
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
		var err error
		switch k {
		case "model":
			err = unmarshalParam(k, raw, &g.Model)
		case "messages":
			g.Messages, err = chatMessages(raw)
		case "max_tokens", "max_completion_tokens":
			var n int
			if err = unmarshalParam(k, raw, &n); err == nil {
				if g.MaxTokens != nil && *g.MaxTokens != n {
					err = badRequest(k, "max_tokens and max_completion_tokens differ (%d and %d); give one", *g.MaxTokens, n)
				}
				if n < 1 || n > jobs.MaxMaxTokens {
					err = badRequest(k, "%s must be between 1 and %d, got %d", k, jobs.MaxMaxTokens, n)
				}
				g.MaxTokens = &n
			}
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
			err = unmarshalParam(k, raw, &opts.Stream)
		case "stream_options":
			var so struct {
				IncludeUsage bool `json:"include_usage"`
			}
			err = unmarshalParam(k, raw, &so)
			opts.IncludeUsage = so.IncludeUsage
		case "n":
			var n int
			if err = unmarshalParam(k, raw, &n); err == nil && n != 1 {
				err = unsupported(k, "n must be 1: one choice per request")
			}
		case "frequency_penalty":
			err = unmarshalParam(k, raw, &g.FrequencyPenalty)
		case "presence_penalty":
			err = unmarshalParam(k, raw, &g.PresencePenalty)
		case "repetition_penalty": // vLLM's and llama.cpp's
			err = unmarshalParam(k, raw, &g.RepetitionPenalty)
		case "logprobs":
			err = unmarshalParam(k, raw, &g.Logprobs)
		case "top_logprobs":
			err = unmarshalParam(k, raw, &g.TopLogprobs)
		case "response_format":
			g.ResponseFormat, err = responseFormat(raw)
		default:
			switch {
			case slices.Contains(ignoredChatFields, k):
			case slices.Contains(refusedChatFields, k):
				err = unsupported(k, "%s is not supported by this server", k)
			default:
				err = badRequest(k, "unknown parameter %q", clip(k))
			}
		}
		if err != nil {
			return nil, opts, err
		}
	}
	if g.Messages == nil {
		return nil, opts, badRequest("messages", "messages is required")
	}
	if so := doc["stream_options"]; so != nil && string(so) != "null" && !opts.Stream {
		return nil, opts, badRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	if err := g.Validate(); err != nil {
		var ve *jobs.ValidationError
		if errors.As(err, &ve) && strings.HasPrefix(ve.Field, "response_format") {
			// OpenAI names the top-level parameter; the message names the member and keyword.
			return nil, opts, badRequest("response_format", "%s", ve.Error())
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

// chatMessages reads OpenAI messages: content as a string or as text parts; "developer" is
// the system role of newer models.
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
		switch role {
		case "developer":
			role = jobs.RoleSystem
		case jobs.RoleSystem, jobs.RoleUser, jobs.RoleAssistant:
		case "tool", "function":
			return nil, unsupported(field+".role", "%s messages are not supported (no tool calling)", role)
		default:
			return nil, badRequest(field+".role", "role must be system, developer, user or assistant, got %q", clip(role))
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
		text, err := chatContent(field+".content", m["content"])
		if err != nil {
			return nil, err
		}
		out = append(out, jobs.Message{Role: role, Content: text})
	}
	return out, nil
}

func chatContent(field string, raw json.RawMessage) (string, error) {
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
		if p.Type != "text" || p.Text == nil {
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

// ChatChoice is one choice; there is always exactly one.
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
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// completionOf is the chat.completion of a finished job.
func completionOf(jobID string, created time.Time, res jobs.Result) ChatCompletion {
	return ChatCompletion{
		ID: "chatcmpl-" + jobID, Object: "chat.completion", Created: created.Unix(), Model: res.Model,
		Choices: []ChatChoice{{Message: ChatReplyMessage{Role: jobs.RoleAssistant, Content: res.Text, ReasoningContent: res.Reasoning},
			FinishReason: string(res.FinishReason), Logprobs: res.Logprobs}},
		Usage:             ChatUsage(res.Usage),
		SystemFingerprint: "redlite-" + res.Worker,
	}
}
