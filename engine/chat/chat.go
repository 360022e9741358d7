// Package chat renders conversations into the prompt a model was trained on, with the model's
// own chat template (the GGUF key tokenizer.chat_template) run by a Jinja engine set up as
// Hugging Face transformers sets up jinja2 (package jinja), and tokenizes the prompt so that
// no text a client sends can become a control token.
//
// A template comes from outside, so it renders under jinja.Limits: bounded time, output and
// memory, and bounded nesting; a failing or runaway template is an error of that job, never
// of the process.
package chat

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/redlite/batch/engine/chat/jinja"
	"github.com/redlite/batch/engine/gguf"
)

// KeyTemplate is the GGUF metadata key of the chat template.
const KeyTemplate = "tokenizer.chat_template"

// ErrNoTemplate is wrapped by FromGGUF when the file carries no chat template.
var ErrNoTemplate = errors.New("chat: the model file has no chat template (" + KeyTemplate + ")")

// ErrTemplate is wrapped by every error of a template: it does not compile, it raised, or it
// went past its limits.
var ErrTemplate = errors.New("chat template")

// Template is a compiled chat template.
type Template struct {
	// Name says where the template came from: "gguf" for a model's own, or a built-in name.
	Name string
	// Source is the template's Jinja text.
	Source string
	// BOSToken and EOSToken are the template's bos_token and eos_token variables: the texts
	// of the model's BOS and EOS tokens (FromGGUF sets them).
	BOSToken, EOSToken string
	// Limits bound each render (zero: jinja's defaults).
	Limits jinja.Limits

	compiled *jinja.Template
}

// New compiles a chat template.
func New(name, src string) (*Template, error) {
	if strings.TrimSpace(src) == "" {
		return nil, fmt.Errorf("%w %s: the template is empty", ErrTemplate, name)
	}
	c, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("%w %s does not compile: %w", ErrTemplate, name, err)
	}
	return &Template{Name: name, Source: src, compiled: c}, nil
}

//go:embed builtin/*.jinja
var builtins embed.FS

// Builtin returns a template this package carries, by name (BuiltinNames), for a model file
// that has none of its own: an operator's explicit choice, never a guess. "chatml" is plain
// ChatML; "qwen3" is the Qwen3 family's own template (thinking, tools).
func Builtin(name string) (*Template, error) {
	src, err := builtins.ReadFile("builtin/" + name + ".jinja")
	if err != nil || name == "" || strings.ContainsAny(name, "/.") {
		return nil, fmt.Errorf("%w: no built-in template %q (have %s)", ErrTemplate, name, strings.Join(BuiltinNames(), ", "))
	}
	t, err := New(name, string(src))
	if err != nil {
		return nil, err
	}
	t.EOSToken = "<|im_end|>"
	return t, nil
}

// BuiltinNames lists the names Builtin accepts.
func BuiltinNames() []string {
	entries, _ := builtins.ReadDir("builtin")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".jinja"))
	}
	return names
}

// FromGGUF compiles the chat template stored in f, with the texts of f's BOS and EOS tokens.
func FromGGUF(f *gguf.File) (*Template, error) {
	src, err := f.String(KeyTemplate)
	if err != nil {
		if _, ok := f.Get(KeyTemplate); !ok {
			return nil, ErrNoTemplate
		}
		return nil, fmt.Errorf("chat: %w", err)
	}
	t, err := New("gguf", src)
	if err != nil {
		return nil, err
	}
	if tokens, err := f.Strings("tokenizer.ggml.tokens"); err == nil {
		text := func(key string) string {
			id, err := f.IntOr(key, -1)
			if err != nil || id < 0 || id >= int64(len(tokens)) {
				return ""
			}
			return tokens[id]
		}
		t.BOSToken, t.EOSToken = text("tokenizer.ggml.bos_token_id"), text("tokenizer.ggml.eos_token_id")
	}
	return t, nil
}

// Conversation is what a template renders: the format of one case of
// testdata/fixtures/templates/cases.json and of `redlite chat-template --case`.
type Conversation struct {
	// Messages is a JSON array of message objects ({"role", "content", …}), passed to the
	// template as given: content may be null or a list, assistant messages may carry
	// reasoning_content and tool_calls. Key order is kept (tojson prints keys in order).
	Messages json.RawMessage `json:"messages"`
	// Tools is a JSON array of tool definitions, or empty for none (the template sees None).
	Tools json.RawMessage `json:"tools,omitempty"`
	// AddGenerationPrompt ends the prompt with the opening of an assistant turn.
	AddGenerationPrompt bool `json:"add_generation_prompt"`
	// EnableThinking is passed to the template when set; nil leaves it undefined, as
	// transformers does when apply_chat_template is called without it.
	EnableThinking *bool `json:"enable_thinking,omitempty"`
}

// Message is one plain turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Messages encodes plain messages for Conversation.Messages.
func Messages(msgs ...Message) json.RawMessage {
	b, _ := json.Marshal(msgs) // strings only: cannot fail
	return b
}

// vars decodes a conversation into the template's variables.
func (t *Template) vars(c Conversation) (map[string]jinja.Value, error) {
	if len(c.Messages) == 0 {
		return nil, errors.New("chat: no messages")
	}
	msgs, err := jinja.FromJSON(c.Messages)
	if err != nil {
		return nil, fmt.Errorf("chat: messages: %w", err)
	}
	list, ok := msgs.([]jinja.Value)
	if !ok {
		return nil, errors.New("chat: messages must be a JSON array")
	}
	for i, m := range list {
		d, ok := m.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("chat: message %d is not an object", i)
		}
		if r, _ := d.Get("role"); r == nil {
			return nil, fmt.Errorf("chat: message %d has no role", i)
		}
	}
	var tools jinja.Value
	if s := strings.TrimSpace(string(c.Tools)); s != "" && s != "null" {
		if tools, err = jinja.FromJSON(c.Tools); err != nil {
			return nil, fmt.Errorf("chat: tools: %w", err)
		}
		if _, ok := tools.([]jinja.Value); !ok {
			return nil, errors.New("chat: tools must be a JSON array")
		}
	}
	v := map[string]jinja.Value{
		"messages":              list,
		"tools":                 tools,
		"add_generation_prompt": c.AddGenerationPrompt,
		"bos_token":             t.BOSToken,
		"eos_token":             t.EOSToken,
	}
	if c.EnableThinking != nil {
		v["enable_thinking"] = *c.EnableThinking
	}
	return v, nil
}

// Render returns the prompt exactly as the template renders c. Tokenizing it with special
// parsing would also turn control-token text inside a message into control tokens: use
// Encode for prompts that carry outside text.
func (t *Template) Render(c Conversation) (string, error) {
	v, err := t.vars(c)
	if err != nil {
		return "", err
	}
	return t.render(v)
}

func (t *Template) render(v map[string]jinja.Value) (string, error) {
	out, err := t.compiled.Render(v, t.Limits)
	if err != nil {
		return "", fmt.Errorf("%w %s: %w", ErrTemplate, t.Name, err)
	}
	return out, nil
}
