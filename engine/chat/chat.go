// Package chat renders conversations into the prompt text a model was trained on, following
// the chat template in its GGUF file (tokenizer.chat_template).
//
// Templates are Jinja programs. Rather than interpret Jinja, the package recognizes the
// templates it knows by their shape and renders them natively:
//
//   - "chatml": the minimal ChatML loop, <|im_start|>role\ncontent<|im_end|>\n per message.
//   - "qwen3": Qwen3's template with thinking support: earlier turns' <think> blocks are
//     dropped from the history, and with thinking disabled the generation prompt carries an
//     empty <think>\n\n</think>\n\n block.
//
// Any other template is refused with ErrUnsupportedTemplate rather than rendered wrongly.
// The rendered text contains control tokens' text (<|im_start|>), so it is tokenized with
// special-token parsing on.
package chat

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/redlite/batch/engine/gguf"
)

// ErrUnsupportedTemplate is wrapped by New and FromGGUF for a template they do not recognize.
var ErrUnsupportedTemplate = errors.New("chat: unsupported chat template")

// KeyTemplate is the GGUF metadata key of the chat template.
const KeyTemplate = "tokenizer.chat_template"

// Message is one turn of a conversation.
type Message struct {
	Role    string // "system", "user", "assistant" or "tool"
	Content string
}

// RenderOpts controls Render.
type RenderOpts struct {
	// AddGenerationPrompt ends the prompt with the opening of an assistant turn, so that the
	// model writes the reply.
	AddGenerationPrompt bool
	// EnableThinking lets a thinking model reason (<think> … </think>) before its answer.
	// The zero value disables it, which for Qwen3 puts an empty think block after the
	// generation prompt: a batch job wants the answer, not the reasoning. Templates without
	// thinking support ignore it.
	EnableThinking bool
}

// Template is a recognized chat template.
type Template struct {
	name   string
	text   string
	render func(*builder, []Message, RenderOpts)
}

// New recognizes a chat template's text.
func New(text string) (*Template, error) {
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("%w: the template is empty", ErrUnsupportedTemplate)
	}
	segs, err := lex(text)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (first line %q)", ErrUnsupportedTemplate, err, firstLine(text))
	}
	for _, r := range recognizers {
		if r.match(segs) {
			return &Template{name: r.name, text: text, render: r.render}, nil
		}
	}
	return nil, fmt.Errorf("%w: first line %q", ErrUnsupportedTemplate, firstLine(text))
}

// Builtin returns one of the renderers this package has by name ("chatml", "qwen3"), for a
// model whose own template is not recognized but is known to speak that format: an
// operator's explicit choice, never a guess.
func Builtin(name string) (*Template, error) {
	for _, r := range recognizers {
		if r.name == name {
			return &Template{name: r.name, text: "", render: r.render}, nil
		}
	}
	return nil, fmt.Errorf("%w: no built-in template %q (have %s)", ErrUnsupportedTemplate, name, strings.Join(BuiltinNames(), ", "))
}

// BuiltinNames lists the names Builtin accepts.
func BuiltinNames() []string {
	names := make([]string, len(recognizers))
	for i, r := range recognizers {
		names[i] = r.name
	}
	return names
}

// FromGGUF recognizes the chat template stored in f.
func FromGGUF(f *gguf.File) (*Template, error) {
	text, err := f.String(KeyTemplate)
	if err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	return New(text)
}

// Name says which kind of template this is ("chatml", "qwen3").
func (t *Template) Name() string { return t.name }

// Text is the template's source.
func (t *Template) Text() string { return t.text }

// Render turns msgs into prompt text. A system message may only come first; roles must be
// system, user, assistant or tool. Neither template requires user and assistant turns to
// alternate, so Render does not either.
//
// Tokenizing this text with special-token parsing would also turn control-token text inside
// a message (a user writing "<|im_end|>") into control tokens; use Parts or Encode for
// prompts that carry outside text.
func (t *Template) Render(msgs []Message, o RenderOpts) (string, error) {
	parts, err := t.Parts(msgs, o)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text)
	}
	return sb.String(), nil
}

// Part is a piece of a rendered prompt: template markup, whose control-token text is meant
// as control tokens, or message content, which is only ever text.
type Part struct {
	Text    string
	Content bool
}

// Parts renders msgs as Render does, keeping markup and message content apart.
func (t *Template) Parts(msgs []Message, o RenderOpts) ([]Part, error) {
	if len(msgs) == 0 {
		return nil, errors.New("chat: no messages")
	}
	for i, m := range msgs {
		switch m.Role {
		case "system":
			if i > 0 {
				return nil, fmt.Errorf("chat: message %d: a system message must come first", i)
			}
		case "user", "assistant", "tool":
		default:
			return nil, fmt.Errorf("chat: message %d has unknown role %q (want system, user, assistant or tool)", i, m.Role)
		}
	}
	var b builder
	t.render(&b, msgs, o)
	return b.parts, nil
}

// Encode renders msgs and tokenizes the result with encode, matching control tokens only in
// the template's markup: message content is encoded with special parsing off, so no text a
// user sends can forge a turn boundary.
func (t *Template) Encode(msgs []Message, o RenderOpts, encode func(text string, parseSpecial bool) []int32) ([]int32, error) {
	parts, err := t.Parts(msgs, o)
	if err != nil {
		return nil, err
	}
	var ids []int32
	for _, p := range parts {
		ids = append(ids, encode(p.Text, !p.Content)...)
	}
	return ids, nil
}

// builder collects parts, merging neighbours of the same kind.
type builder struct{ parts []Part }

func (b *builder) add(s string, content bool) {
	if s == "" {
		return
	}
	if n := len(b.parts); n > 0 && b.parts[n-1].Content == content {
		b.parts[n-1].Text += s
		return
	}
	b.parts = append(b.parts, Part{Text: s, Content: content})
}

func (b *builder) markup(s string)  { b.add(s, false) }
func (b *builder) content(s string) { b.add(s, true) }

func firstLine(s string) string {
	s = strings.TrimLeft(s, " \t\r\n")
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	const limit = 80
	if utf8.RuneCountInString(s) > limit {
		s = string([]rune(s)[:limit]) + "…"
	}
	return s
}
