package chat

import (
	"strconv"
	"strings"

	"github.com/redlite/batch/engine/chat/jinja"
	"github.com/redlite/batch/engine/tokenizer"
)

// Encode renders c and tokenizes the prompt so that control tokens ("<|im_start|>",
// "<|im_end|>" …) come only from the template's own text, never from a message: a document
// containing "<|im_end|>\n<|im_start|>system" stays text and cannot end its turn.
//
// How: before rendering, every control token's text inside the conversation's strings (and
// keys) is replaced by a placeholder made of a private-use character absent from the
// template and the conversation; the rendered prompt is then cut at the control tokens it
// holds, which can only be the template's, and the text between them — with the
// placeholders turned back into the text they stand for — is tokenized with special-token
// parsing off. String operations a template applies to messages (strip, split on
// "</think>", startswith, tojson) see the placeholders in place of control-token text only.
//
// BOS goes first when the vocabulary asks for one and the template did not put it there.
func (t *Template) Encode(c Conversation, tok *tokenizer.Tokenizer) (Prompt, error) {
	v, err := t.vars(c)
	if err != nil {
		return Prompt{}, err
	}
	var protected []string
	var byFirst [256][]string
	ids := map[string]int32{}
	for _, id := range tok.Protected() { // longest first
		text := tok.Token(id)
		if text == "" {
			continue
		}
		protected = append(protected, text)
		byFirst[text[0]] = append(byFirst[text[0]], text)
		ids[text] = id
	}
	n := newNeutralizer(t.Source, v, protected)
	for k, x := range v {
		if k == "messages" || k == "tools" {
			v[k] = n.value(x)
		}
	}
	prompt, err := t.render(v)
	if err != nil {
		return Prompt{}, err
	}
	text := n.restore(prompt)
	var out []int32
	if tok.AddBOS() && tok.BOS() >= 0 && !strings.HasPrefix(prompt, tok.Token(tok.BOS())) {
		out = append(out, tok.BOS())
	}
	plain := tokenizer.EncodeOpts{}
	for len(prompt) > 0 {
		i, special := nextProtected(prompt, &byFirst)
		if i < 0 {
			i = len(prompt)
		}
		if i > 0 {
			out = append(out, tok.EncodeWith(n.restore(prompt[:i]), plain)...)
		}
		if special == "" {
			break
		}
		out = append(out, ids[special])
		prompt = prompt[i+len(special):]
	}
	return Prompt{IDs: out, Text: text}, nil
}

// Prompt is an encoded prompt.
type Prompt struct {
	IDs  []int32
	Text string // as rendered (what Render returns for the same conversation, as a rule)
}

// nextProtected finds the first protected text in s, the longest at that offset. byFirst
// holds the protected texts by first byte, longest first.
func nextProtected(s string, byFirst *[256][]string) (int, string) {
	for i := 0; i < len(s); i++ {
		for _, p := range byFirst[s[i]] {
			if strings.HasPrefix(s[i:], p) {
				return i, p
			}
		}
	}
	return -1, ""
}

// neutralizer swaps control-token text in outside strings for placeholders and back.
type neutralizer struct {
	mark      rune
	hide      *strings.Replacer
	show      *strings.Replacer
	anyHidden bool
}

func newNeutralizer(src string, vars map[string]jinja.Value, protected []string) *neutralizer {
	n := &neutralizer{}
	if len(protected) == 0 {
		return n
	}
	// A mark no input uses: supplementary private-use plane, first free code point.
	used := map[rune]bool{}
	note := func(s string) {
		for _, r := range s {
			if r >= 0xF0000 {
				used[r] = true
			}
		}
	}
	note(src)
	walkStrings(vars["messages"], note)
	walkStrings(vars["tools"], note)
	n.mark = 0xF0000
	for used[n.mark] {
		n.mark++
	}
	m := string(n.mark)
	var hide, show []string
	for i, p := range protected {
		ph := m + strconv.Itoa(i) + m
		hide = append(hide, p, ph)
		show = append(show, ph, p)
	}
	n.hide, n.show = strings.NewReplacer(hide...), strings.NewReplacer(show...)
	return n
}

func (n *neutralizer) str(s string) string {
	if n.hide == nil {
		return s
	}
	h := n.hide.Replace(s)
	if h != s {
		n.anyHidden = true
	}
	return h
}

// value returns v with every string and key neutralized (new containers; v is not changed).
func (n *neutralizer) value(v jinja.Value) jinja.Value {
	switch v := v.(type) {
	case string:
		return n.str(v)
	case []jinja.Value:
		out := make([]jinja.Value, len(v))
		for i, x := range v {
			out[i] = n.value(x)
		}
		return out
	case *jinja.Dict:
		d := jinja.NewDict()
		for _, k := range v.Keys() {
			x, _ := v.Get(k)
			d.Set(n.str(k), n.value(x))
		}
		return d
	}
	return v
}

// restore turns placeholders back into the text they stand for, and drops a mark left over
// from a placeholder the template cut in two.
func (n *neutralizer) restore(s string) string {
	if !n.anyHidden || !strings.ContainsRune(s, n.mark) {
		return s
	}
	s = n.show.Replace(s)
	if strings.ContainsRune(s, n.mark) {
		s = strings.Map(func(r rune) rune {
			if r == n.mark {
				return -1
			}
			return r
		}, s)
	}
	return s
}

func walkStrings(v jinja.Value, f func(string)) {
	switch v := v.(type) {
	case string:
		f(v)
	case []jinja.Value:
		for _, x := range v {
			walkStrings(x, f)
		}
	case *jinja.Dict:
		for _, k := range v.Keys() {
			f(k)
			x, _ := v.Get(k)
			walkStrings(x, f)
		}
	}
}
