package grammar

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Parse reads a grammar in the GBNF-like notation:
//
//	root   ::= "{" pair ("," pair)* "}"   # a comment
//	pair   ::= name ":" [0-9]+
//	name   ::= "\"" [a-z_]{1,16} "\""
//
// A rule is a name, "::=", and alternatives separated by "|" that may span lines; the next
// "name ::=" starts the next rule. Terms: "literal" (escapes \n \r \t \\ \" \xHH \uHHHH
// \UHHHHHHHH), [class] and [^class] of code points, "." (any character), a rule name,
// ( group ), each optionally followed by *, +, ?, {m}, {m,} or {m,n}. Generation starts at
// the rule named root. Errors name the line and column.
func Parse(src string) (*Grammar, error) {
	p := &parser{src: src, line: 1, col: 1}
	g := &Grammar{Rules: map[string]Expr{}, Root: "root"}
	p.space(true)
	for p.pos < len(p.src) {
		name := p.name()
		if name == "" {
			return nil, p.errorf("expected a rule name")
		}
		p.space(true)
		if !p.eat("::=") {
			return nil, p.errorf("expected ::= after rule name %q", name)
		}
		if _, dup := g.Rules[name]; dup {
			return nil, p.errorf("rule %q is defined twice", name)
		}
		e, err := p.alternatives(0)
		if err != nil {
			return nil, err
		}
		g.Rules[name] = e
		p.space(true)
	}
	if len(g.Rules) == 0 {
		return nil, fmt.Errorf("%w: no rules", ErrGrammar)
	}
	if _, ok := g.Rules["root"]; !ok {
		return nil, fmt.Errorf("%w: no rule named root", ErrGrammar)
	}
	return g, nil
}

// maxDepth bounds the nesting of groups, so that hostile input cannot exhaust the stack.
const maxDepth = 100

type parser struct {
	src       string
	pos       int
	line, col int
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: line %d, column %d: %s", ErrGrammar, p.line, p.col, fmt.Sprintf(format, args...))
}

func (p *parser) advance(n int) {
	for range n {
		if p.src[p.pos] == '\n' {
			p.line, p.col = p.line+1, 1
		} else {
			p.col++
		}
		p.pos++
	}
}

// space skips blanks and comments; newlines too when nl is set.
func (p *parser) space(nl bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n'):
			p.advance(1)
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.advance(1)
			}
		default:
			return
		}
	}
}

func (p *parser) eat(s string) bool {
	if len(p.src)-p.pos >= len(s) && p.src[p.pos:p.pos+len(s)] == s {
		p.advance(len(s))
		return true
	}
	return false
}

func isNameByte(c byte) bool {
	return c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (p *parser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.advance(1)
	}
	return p.src[start:p.pos]
}

// atRuleStart reports whether the input continues with "name ::=".
func (p *parser) atRuleStart() bool {
	i := p.pos
	for i < len(p.src) && isNameByte(p.src[i]) {
		i++
	}
	if i == p.pos {
		return false
	}
	for i < len(p.src) && (p.src[i] == ' ' || p.src[i] == '\t' || p.src[i] == '\r' || p.src[i] == '\n') {
		i++
	}
	return len(p.src)-i >= 3 && p.src[i:i+3] == "::="
}

func (p *parser) alternatives(depth int) (Expr, error) {
	if depth > maxDepth {
		return nil, p.errorf("groups nested deeper than %d", maxDepth)
	}
	var alts Alt
	for {
		s, err := p.sequence(depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, s)
		p.space(true)
		if !p.eat("|") {
			break
		}
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return alts, nil
}

func (p *parser) sequence(depth int) (Expr, error) {
	var seq Seq
	for {
		p.space(true)
		if p.pos >= len(p.src) || p.src[p.pos] == '|' || p.src[p.pos] == ')' || p.atRuleStart() {
			break
		}
		t, err := p.term(depth)
		if err != nil {
			return nil, err
		}
		if t, err = p.suffix(t); err != nil {
			return nil, err
		}
		seq = append(seq, t)
	}
	if len(seq) == 1 {
		return seq[0], nil
	}
	return seq, nil
}

func (p *parser) term(depth int) (Expr, error) {
	switch c := p.src[p.pos]; {
	case c == '"':
		p.advance(1)
		var lit []byte
		for {
			if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
				return nil, p.errorf("unterminated string literal")
			}
			if p.src[p.pos] == '"' {
				p.advance(1)
				return Lit(lit), nil
			}
			r, err := p.char()
			if err != nil {
				return nil, err
			}
			lit = utf8.AppendRune(lit, r)
		}
	case c == '[':
		p.advance(1)
		var cl Class
		if p.eat("^") {
			cl.Neg = true
		}
		for {
			if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
				return nil, p.errorf("unterminated character class")
			}
			if p.src[p.pos] == ']' {
				p.advance(1)
				return cl, nil
			}
			lo, err := p.char()
			if err != nil {
				return nil, err
			}
			hi := lo
			if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
				p.advance(1)
				if hi, err = p.char(); err != nil {
					return nil, err
				}
				if hi < lo {
					return nil, p.errorf("class range %q-%q is backwards", lo, hi)
				}
			}
			cl.Ranges = append(cl.Ranges, Range{lo, hi})
		}
	case c == '.':
		p.advance(1)
		return Class{Neg: true}, nil
	case c == '(':
		p.advance(1)
		e, err := p.alternatives(depth + 1)
		if err != nil {
			return nil, err
		}
		p.space(true)
		if !p.eat(")") {
			return nil, p.errorf("expected )")
		}
		if s, ok := e.(Seq); ok && len(s) == 0 {
			return Seq{}, nil
		}
		return e, nil
	case isNameByte(c):
		return Ref(p.name()), nil
	}
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return nil, p.errorf("unexpected %q", r)
}

// char reads one character of a literal or class, with its escape.
func (p *parser) char() (rune, error) {
	if p.src[p.pos] != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.pos:])
		if r == utf8.RuneError && n == 1 {
			return 0, p.errorf("invalid UTF-8")
		}
		p.advance(n)
		return r, nil
	}
	p.advance(1)
	if p.pos >= len(p.src) {
		return 0, p.errorf("escape at the end of the input")
	}
	c := p.src[p.pos]
	p.advance(1)
	switch c {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^', '.', '|', '(', ')', '/':
		return rune(c), nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if len(p.src)-p.pos < n {
			return 0, p.errorf(`\%c needs %d hex digits`, c, n)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return 0, p.errorf(`\%c%s is not a code point`, c, p.src[p.pos:p.pos+n])
		}
		p.advance(n)
		return rune(v), nil
	}
	return 0, p.errorf(`unknown escape \%c`, c)
}

func (p *parser) suffix(t Expr) (Expr, error) {
	if p.pos >= len(p.src) {
		return t, nil
	}
	switch p.src[p.pos] {
	case '*':
		p.advance(1)
		return Rep{X: t, Min: 0, Max: -1}, nil
	case '+':
		p.advance(1)
		return Rep{X: t, Min: 1, Max: -1}, nil
	case '?':
		p.advance(1)
		return Rep{X: t, Min: 0, Max: 1}, nil
	case '{':
		p.advance(1)
		lo, ok := p.number()
		if !ok {
			return nil, p.errorf("expected a count after {")
		}
		hi := lo
		if p.eat(",") {
			if p.pos < len(p.src) && p.src[p.pos] == '}' {
				hi = -1
			} else if hi, ok = p.number(); !ok {
				return nil, p.errorf("expected a count after ,")
			}
		}
		if !p.eat("}") {
			return nil, p.errorf("expected } after the count")
		}
		if lo > MaxRepeat || hi > MaxRepeat || (hi >= 0 && hi < lo) {
			return nil, p.errorf("repetition {%d,%d}: counts must satisfy min ≤ max ≤ %d", lo, hi, MaxRepeat)
		}
		return Rep{X: t, Min: lo, Max: hi}, nil
	}
	return t, nil
}

func (p *parser) number() (int, bool) {
	start := p.pos
	for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' && p.pos-start < 9 {
		p.advance(1)
	}
	if p.pos == start {
		return 0, false
	}
	n, err := strconv.Atoi(p.src[start:p.pos])
	return n, err == nil
}

// ParseProgram parses and compiles a grammar.
func ParseProgram(src string) (*Program, error) {
	g, err := Parse(src)
	if err != nil {
		return nil, err
	}
	return Compile(g)
}
