package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Payload is a job's request: *Generate or *Summarize.
type Payload interface {
	// TaskType is TypeGenerate or TypeSummarize.
	TaskType() string
	// Validate checks every field against the contract; errors are *ValidationError.
	Validate() error
	// Options returns the fields common to both types.
	Options() Common
}

// Common holds the fields both payload types accept. It is embedded, so its fields sit at the
// top level of the JSON document.
type Common struct {
	// Model names the model the job wants; empty means the worker's model. A worker with
	// another model refuses the job.
	Model string `json:"model,omitempty"`
	// Priority chooses the queue (QueueFor); empty is normal.
	Priority Priority `json:"priority,omitempty"`
	// Deadline (RFC 3339) is the time by which the job must be done; a running job is
	// stopped then.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Timeout is how long, in whole seconds, one attempt may run. With neither timeout nor
	// deadline, DefaultTimeout applies; with both, whichever ends first.
	Timeout int `json:"timeout,omitempty"`
	// IdempotencyKey becomes the job id, so enqueueing it twice gives one job.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Metadata is any JSON object, echoed back in the result unchanged.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// WebhookURL, if set, receives the result by POST when the job is done.
	WebhookURL string `json:"webhook_url,omitempty"`
}

// Options returns c itself; it makes every payload that embeds Common a Payload.
func (c Common) Options() Common { return c }

// Message is one chat turn.
type Message struct {
	Role    string `json:"role"` // system, user or assistant
	Content string `json:"content"`
}

// Chat roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Generate asks for a completion of a chat (Messages) or of a raw prompt (Prompt).
// Nil pointers mean "use the default".
type Generate struct {
	Version     int       `json:"version"`
	Messages    []Message `json:"messages,omitempty"`
	Prompt      string    `json:"prompt,omitempty"`
	MaxTokens   *int      `json:"max_tokens,omitempty"`
	Temperature *float64  `json:"temperature,omitempty"`
	TopP        *float64  `json:"top_p,omitempty"`
	TopK        *int      `json:"top_k,omitempty"`
	MinP        *float64  `json:"min_p,omitempty"`
	Seed        *int64    `json:"seed,omitempty"`
	Stop        []string  `json:"stop,omitempty"`
	// EnableThinking lets a thinking model reason before it answers (the chat template's
	// enable_thinking); absent or false asks for the answer alone. The reasoning comes back
	// in the result's reasoning field, apart from the text.
	EnableThinking *bool `json:"enable_thinking,omitempty"`
	// ResponseFormat constrains the output's shape (format.go); absent is free text.
	ResponseFormat *ResponseFormat `json:"response_format,omitempty"`
	// Logprobs asks for each generated token's log-probability in the result, with
	// TopLogprobs (0 to 20) most likely alternatives.
	Logprobs    *bool `json:"logprobs,omitempty"`
	TopLogprobs *int  `json:"top_logprobs,omitempty"`
	// PresencePenalty is subtracted once from the logit of every token generated so far,
	// FrequencyPenalty once per time it was generated (OpenAI's); both in [-2, 2], 0 off.
	// RepetitionPenalty divides the positive logits and multiplies the negative ones of
	// those tokens (llama.cpp's); in (0, 10], 1 off. The prompt's tokens are not counted.
	PresencePenalty   *float64 `json:"presence_penalty,omitempty"`
	FrequencyPenalty  *float64 `json:"frequency_penalty,omitempty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
	// N asks for N (1 to MaxN) independent completions of the prompt, which is read once:
	// the result's Choices, each sampled with its own seed stream.
	N *int `json:"n,omitempty"`
	Common
}

// Summarize asks for a summary of Input, shaped by Instructions.
type Summarize struct {
	Version      int           `json:"version"`
	Input        string        `json:"input"`
	Instructions *Instructions `json:"instructions,omitempty"`
	MaxTokens    *int          `json:"max_tokens,omitempty"`
	// Strategy says how a document is summarized: auto (default), single or hierarchical
	// (hierarchy.go explains them).
	Strategy Strategy `json:"strategy,omitempty"`
	// Overlap is how many tokens of the preceding text each piece of a hierarchical summary
	// repeats, so that a point cut at a boundary is seen whole; 0 by default.
	Overlap *int `json:"overlap,omitempty"`
	// ResponseFormat constrains the summary's shape, as Generate's; a hierarchical summary
	// applies it to the final level only.
	ResponseFormat *ResponseFormat `json:"response_format,omitempty"`
	// Part marks a child job of a hierarchical summary (set by workers, not by clients).
	Part *Part `json:"part,omitempty"`
	Common
}

// Instructions shape a summary. Every field is optional.
type Instructions struct {
	// Style is the form: paragraphs (default), bullets or one_sentence.
	Style string `json:"style,omitempty"`
	// Length is free text the model reads, e.g. "about 200 words" or "5 bullet points".
	Length string `json:"length,omitempty"`
	// Language to write the summary in, e.g. "German" or "de"; default: the document's.
	Language string `json:"language,omitempty"`
	// Focus is what the summary should concentrate on, e.g. "risks and open questions".
	Focus string `json:"focus,omitempty"`
}

// Summary styles.
const (
	StyleParagraphs  = "paragraphs"
	StyleBullets     = "bullets"
	StyleOneSentence = "one_sentence"
)

// TaskType implements Payload.
func (*Generate) TaskType() string { return TypeGenerate }

// TaskType implements Payload.
func (*Summarize) TaskType() string { return TypeSummarize }

// Sampling is a request's generation settings with every default filled in.
type Sampling struct {
	MaxTokens   int
	Temperature float64
	TopP        float64
	TopK        int
	MinP        float64
	Seed        *int64 // nil: the worker picks one
	Stop        []string
	// Format is the response format to enforce; nil or text is free text.
	Format *ResponseFormat
	// Logprobs and TopLogprobs ask for the tokens' log-probabilities.
	Logprobs    bool
	TopLogprobs int
	// Penalties, 0 (1 for Repetition) when off.
	PresencePenalty, FrequencyPenalty, RepetitionPenalty float64
	// N is the number of completions, at least 1.
	N int
}

// Sampling returns g's settings with defaults for the fields it leaves out.
func (g *Generate) Sampling() Sampling {
	return Sampling{
		MaxTokens:   valOr(g.MaxTokens, DefaultGenerateMaxTokens),
		Temperature: valOr(g.Temperature, DefaultTemperature),
		TopP:        valOr(g.TopP, DefaultTopP),
		TopK:        valOr(g.TopK, DefaultTopK),
		MinP:        valOr(g.MinP, DefaultMinP),
		Seed:        g.Seed,
		Stop:        g.Stop,
		Format:      g.ResponseFormat,
		Logprobs:    valOr(g.Logprobs, false),
		TopLogprobs: valOr(g.TopLogprobs, 0),

		PresencePenalty:   valOr(g.PresencePenalty, 0),
		FrequencyPenalty:  valOr(g.FrequencyPenalty, 0),
		RepetitionPenalty: valOr(g.RepetitionPenalty, 1),
		N:                 valOr(g.N, 1),
	}
}

// Sampling returns the settings a summary runs with: the defaults, and s's max_tokens.
func (s *Summarize) Sampling() Sampling {
	return Sampling{
		MaxTokens:   valOr(s.MaxTokens, DefaultSummarizeMaxTokens),
		Temperature: DefaultTemperature,
		TopP:        DefaultTopP,
		TopK:        DefaultTopK,
		MinP:        DefaultMinP,
		Format:      s.ResponseFormat,

		RepetitionPenalty: 1,
		N:                 1,
	}
}

func valOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// Validate implements Payload. It checks fields in document order and reports the first
// problem.
func (g *Generate) Validate() error {
	if err := checkVersion(g.Version); err != nil {
		return err
	}
	switch {
	case len(g.Messages) > 0 && g.Prompt != "":
		return invalid("messages", "give either messages or prompt, not both")
	case len(g.Messages) == 0 && g.Prompt == "":
		return invalid("messages", "one of messages or prompt is required")
	case g.EnableThinking != nil && g.Prompt != "":
		return invalid("enable_thinking", "applies to messages (the chat template), not to a raw prompt")
	}
	if len(g.Messages) > MaxMessages {
		return invalid("messages", "must have at most %d messages, got %d", MaxMessages, len(g.Messages))
	}
	total, users := 0, 0
	for i, m := range g.Messages {
		field := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case RoleUser:
			users++
		case RoleAssistant:
		case RoleSystem:
			if i != 0 {
				return invalid(field+".role", "system is allowed only as the first message")
			}
		default:
			return invalid(field+".role", "must be one of system, user, assistant, got %q", clip(m.Role))
		}
		if err := checkText(field+".content", m.Content, MaxInputBytes); err != nil {
			return err
		}
		total += len(m.Content)
	}
	if len(g.Messages) > 0 && users == 0 {
		return invalid("messages", "must contain at least one user message")
	}
	if total > MaxInputBytes {
		return invalid("messages", "total content must be at most %d bytes, got %d", MaxInputBytes, total)
	}
	if g.Prompt != "" {
		if err := checkText("prompt", g.Prompt, MaxInputBytes); err != nil {
			return err
		}
	}
	if err := checkMaxTokens(g.MaxTokens); err != nil {
		return err
	}
	if v := g.Temperature; v != nil && !(*v >= 0 && *v <= MaxTemperature) {
		return invalid("temperature", "must be between 0 and %g, got %g", MaxTemperature, *v)
	}
	if v := g.TopP; v != nil && !(*v > 0 && *v <= 1) {
		return invalid("top_p", "must be greater than 0 and at most 1, got %g", *v)
	}
	if v := g.TopK; v != nil && (*v < 0 || *v > MaxTopK) {
		return invalid("top_k", "must be between 0 (off) and %d, got %d", MaxTopK, *v)
	}
	if v := g.MinP; v != nil && !(*v >= 0 && *v <= 1) {
		return invalid("min_p", "must be between 0 and 1, got %g", *v)
	}
	if v := g.Seed; v != nil && (*v < 0 || *v > MaxSeed) {
		return invalid("seed", "must be between 0 and %d, got %d", int64(MaxSeed), *v)
	}
	if len(g.Stop) > MaxStop {
		return invalid("stop", "must have at most %d strings, got %d", MaxStop, len(g.Stop))
	}
	for i, s := range g.Stop {
		field := fmt.Sprintf("stop[%d]", i)
		if s == "" {
			return invalid(field, "must not be empty")
		}
		if err := checkText(field, s, MaxStopBytes); err != nil {
			return err
		}
	}
	if err := validateFormat(g.ResponseFormat); err != nil {
		return err
	}
	if g.EnableThinking != nil && *g.EnableThinking && g.ResponseFormat != nil && g.ResponseFormat.Type != FormatText {
		// The grammar holds from the first token: the reasoning could not be written.
		return invalid("enable_thinking", "cannot be combined with a response_format other than text")
	}
	if err := g.validateSampling(); err != nil {
		return err
	}
	return g.Common.validate()
}

// Validate implements Payload.
func (s *Summarize) Validate() error {
	if err := checkVersion(s.Version); err != nil {
		return err
	}
	if strings.TrimSpace(s.Input) == "" {
		return invalid("input", "is required and must not be blank")
	}
	if err := checkText("input", s.Input, MaxInputBytes); err != nil {
		return err
	}
	if in := s.Instructions; in != nil {
		switch in.Style {
		case "", StyleParagraphs, StyleBullets, StyleOneSentence:
		default:
			return invalid("instructions.style", "must be one of paragraphs, bullets, one_sentence, got %q", clip(in.Style))
		}
		for _, f := range []struct {
			name, v string
			max     int
		}{
			{"instructions.length", in.Length, MaxInstructionLength},
			{"instructions.language", in.Language, MaxInstructionLang},
			{"instructions.focus", in.Focus, MaxInstructionFocus},
		} {
			if err := checkText(f.name, f.v, f.max); err != nil {
				return err
			}
		}
	}
	if err := checkMaxTokens(s.MaxTokens); err != nil {
		return err
	}
	if err := s.validateStrategy(); err != nil {
		return err
	}
	if err := validateFormat(s.ResponseFormat); err != nil {
		return err
	}
	return s.Common.validate()
}

func (c *Common) validate() error {
	if len(c.Model) > MaxModelBytes {
		return invalid("model", "must be at most %d bytes, got %d", MaxModelBytes, len(c.Model))
	}
	if !printable(c.Model) {
		return invalid("model", "must be printable UTF-8 text")
	}
	switch c.Priority {
	case "", PriorityHigh, PriorityNormal, PriorityLow:
	default:
		return invalid("priority", "must be one of high, normal, low, got %q", clip(string(c.Priority)))
	}
	if c.Deadline != nil && c.Deadline.IsZero() {
		return invalid("deadline", "must be an RFC 3339 time, got the zero time")
	}
	if c.Timeout < 0 || c.Timeout > MaxTimeoutSeconds {
		return invalid("timeout", "must be between 1 and %d seconds, got %d", MaxTimeoutSeconds, c.Timeout)
	}
	if k := c.IdempotencyKey; k != "" {
		if len(k) > MaxIdempotencyKeyLen {
			return invalid("idempotency_key", "must be at most %d bytes, got %d", MaxIdempotencyKeyLen, len(k))
		}
		for i := 0; i < len(k); i++ {
			if !idKeyByte(k[i]) {
				return invalid("idempotency_key", "may contain only A-Z a-z 0-9 and . _ : -, got %q at byte %d", k[i], i)
			}
		}
	}
	if len(c.Metadata) > 0 {
		if len(c.Metadata) > MaxMetadataBytes {
			return invalid("metadata", "must be at most %d bytes of JSON, got %d", MaxMetadataBytes, len(c.Metadata))
		}
		if !json.Valid(c.Metadata) {
			return invalid("metadata", "must be valid JSON")
		}
		if t := jsonKind(c.Metadata); t != "object" && t != "null" {
			return invalid("metadata", "must be a JSON object, got %s", t)
		}
		if d := jsonDepth(c.Metadata); d > MaxMetadataDepth {
			return invalid("metadata", "must nest at most %d levels of objects and arrays, got %d", MaxMetadataDepth, d)
		}
	}
	if u := c.WebhookURL; u != "" {
		if len(u) > MaxWebhookURLBytes {
			return invalid("webhook_url", "must be at most %d bytes, got %d", MaxWebhookURLBytes, len(u))
		}
		p, err := url.Parse(u)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // without the URL, which may hold a secret
			}
			return invalid("webhook_url", "is not a URL: %v", err)
		}
		if p.Scheme != "http" && p.Scheme != "https" {
			return invalid("webhook_url", "scheme must be http or https, got %q", clip(p.Scheme))
		}
		if p.Host == "" {
			return invalid("webhook_url", "must have a host")
		}
		if p.User != nil {
			return invalid("webhook_url", "must not carry credentials (user:password@): verify deliveries by their signature (REDLITE_WEBHOOK_SECRET), or put a token in the path")
		}
		if msg := hostSpellingProblem(p.Hostname()); msg != "" {
			return invalid("webhook_url", "host %q %s", clip(p.Hostname()), msg)
		}
	}
	return nil
}

func checkVersion(v int) error {
	if v != Version {
		return invalid("version", "must be %d, got %d", Version, v)
	}
	return nil
}

func checkMaxTokens(p *int) error {
	if p != nil && (*p < 1 || *p > MaxMaxTokens) {
		return invalid("max_tokens", "must be between 1 and %d, got %d", MaxMaxTokens, *p)
	}
	return nil
}

func checkText(field, s string, max int) error {
	if len(s) > max {
		return invalid(field, "must be at most %d bytes, got %d", max, len(s))
	}
	if !utf8.ValidString(s) {
		for i, r := range s {
			if r == utf8.RuneError {
				if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
					return invalid(field, "must be valid UTF-8: invalid byte at offset %d", i)
				}
			}
		}
	}
	return nil
}

func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func idKeyByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '.' || b == '_' || b == ':' || b == '-'
}

// jsonDepth is how deeply objects and arrays nest in a valid JSON text, counted without
// recursion so that any depth is measured in constant stack.
func jsonDepth(raw []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(raw); i++ {
		switch b := raw[i]; {
		case inString && b == '\\':
			i++ // the escaped byte cannot end the string
		case b == '"':
			inString = !inString
		case inString:
		case b == '{' || b == '[':
			depth++
			deepest = max(deepest, depth)
		case b == '}' || b == ']':
			depth--
		}
	}
	return deepest
}

// jsonKind names the JSON type of a raw value, for error messages.
func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// clip shortens a user-supplied value quoted in an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
