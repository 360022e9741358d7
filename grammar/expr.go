// Package grammar constrains generation to a formal language: a grammar in a GBNF-like
// notation, a regular expression, or a JSON Schema, all turned into one form (rules of
// expressions over Unicode text), compiled to a byte-level pushdown automaton, and matched
// against a tokenizer's vocabulary so that a sampler only ever draws tokens that keep the
// output inside the language.
//
// The three front ends build a Grammar; Compile checks it (undefined rules, left recursion)
// and lowers it to bytes (character classes become UTF-8 byte sequences); a Matcher per
// sequence masks logits step by step (see matcher.go).
package grammar

import (
	"fmt"
	"slices"
	"strings"
)

// Expr is one expression of a grammar: Seq, Alt, Lit, Class, Ref or Rep.
type Expr interface{ expr() }

// Seq matches its parts one after the other; the empty Seq matches the empty string.
type Seq []Expr

// Alt matches any one of its choices.
type Alt []Expr

// Lit matches its bytes exactly.
type Lit string

// Class matches one Unicode code point inside (or, negated, outside) its ranges, each a
// closed interval [Lo, Hi].
type Class struct {
	Ranges []Range
	Neg    bool
}

// Range is a closed interval of code points.
type Range struct{ Lo, Hi rune }

// Ref matches the rule of that name.
type Ref string

// Rep matches X at least Min and at most Max times; Max < 0 means no bound.
type Rep struct {
	X        Expr
	Min, Max int
}

func (Seq) expr()   {}
func (Alt) expr()   {}
func (Lit) expr()   {}
func (Class) expr() {}
func (Ref) expr()   {}
func (Rep) expr()   {}

// Grammar is a set of named rules; generation starts at Root.
type Grammar struct {
	Rules map[string]Expr
	Root  string
}

// Limits of what a grammar may ask of the compiler, so that outside input cannot make it
// build an automaton of unbounded size.
const (
	// MaxRepeat bounds the counts of {m,n}, minLength/maxLength and minItems/maxItems.
	MaxRepeat = 1000
	// MaxElements bounds the compiled program (byte sets and rule references).
	MaxElements = 1 << 20
)

// String writes g in the GBNF-like notation Parse reads, rules sorted by name with the root
// first: for debugging and for tests that compare front ends.
func (g *Grammar) String() string {
	var sb strings.Builder
	names := make([]string, 0, len(g.Rules))
	for n := range g.Rules {
		if n != g.Root {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if _, ok := g.Rules[g.Root]; ok {
		names = append([]string{g.Root}, names...)
	}
	for _, n := range names {
		fmt.Fprintf(&sb, "%s ::= %s\n", n, format(g.Rules[n], false))
	}
	return sb.String()
}

func format(e Expr, inner bool) string {
	switch e := e.(type) {
	case Seq:
		if len(e) == 0 {
			return `""`
		}
		parts := make([]string, len(e))
		for i, x := range e {
			parts[i] = format(x, true)
		}
		s := strings.Join(parts, " ")
		if inner && len(e) > 1 {
			return "(" + s + ")"
		}
		return s
	case Alt:
		parts := make([]string, len(e))
		for i, x := range e {
			parts[i] = format(x, false)
		}
		s := strings.Join(parts, " | ")
		if inner || len(e) == 0 {
			return "(" + s + ")"
		}
		return s
	case Lit:
		return quote(string(e))
	case Class:
		var sb strings.Builder
		sb.WriteByte('[')
		if e.Neg {
			sb.WriteByte('^')
		}
		for _, r := range e.Ranges {
			sb.WriteString(classChar(r.Lo))
			if r.Hi != r.Lo {
				sb.WriteByte('-')
				sb.WriteString(classChar(r.Hi))
			}
		}
		sb.WriteByte(']')
		return sb.String()
	case Ref:
		return string(e)
	case Rep:
		x := format(e.X, true)
		switch {
		case e.Min == 0 && e.Max < 0:
			return x + "*"
		case e.Min == 1 && e.Max < 0:
			return x + "+"
		case e.Min == 0 && e.Max == 1:
			return x + "?"
		case e.Max < 0:
			return fmt.Sprintf("%s{%d,}", x, e.Min)
		case e.Min == e.Max:
			return fmt.Sprintf("%s{%d}", x, e.Min)
		}
		return fmt.Sprintf("%s{%d,%d}", x, e.Min, e.Max)
	}
	return fmt.Sprintf("<%T>", e)
}

func quote(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&sb, `\x%02X`, c)
		default:
			sb.WriteByte(c)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

func classChar(r rune) string {
	switch {
	case r == ']' || r == '[' || r == '\\' || r == '-' || r == '^':
		return `\` + string(r)
	case r < 0x20 || r == 0x7f:
		return fmt.Sprintf(`\x%02X`, r)
	case r > 0x7f && r <= 0xffff:
		return fmt.Sprintf(`\u%04X`, r)
	case r > 0xffff:
		return fmt.Sprintf(`\U%08X`, r)
	}
	return string(r)
}
