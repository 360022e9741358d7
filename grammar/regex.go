package grammar

import (
	"fmt"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// Regular expressions are read by the standard library's RE2 parser (regexp/syntax: no
// backreferences or lookaround, which no automaton can follow) and turned into a grammar
// expression. A pattern constrains the whole output: "^" and "$" are allowed only at its
// ends, and a pattern without them matches the whole text too (a JSON Schema pattern is
// unanchored, and a string that matches it entirely matches it anywhere).

// FromRegex returns the grammar of the texts that pattern matches entirely.
func FromRegex(pattern string) (*Grammar, error) {
	e, err := regexExpr(pattern, nil)
	if err != nil {
		return nil, err
	}
	return &Grammar{Rules: map[string]Expr{"root": e}, Root: "root"}, nil
}

// escaper turns a character of the pattern into the text that spells it (inside a JSON
// string: escapes for '"', '\' and control characters); nil means as itself.
type escaper func(r rune) string

func regexExpr(pattern string, esc escaper) (Expr, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("%w: regular expression %q: %v", ErrGrammar, pattern, err)
	}
	// Anchors at the ends are what the grammar does anyway.
	if re.Op == syntax.OpConcat && len(re.Sub) > 0 {
		if op := re.Sub[0].Op; op == syntax.OpBeginText || op == syntax.OpBeginLine {
			re.Sub = re.Sub[1:]
		}
		if n := len(re.Sub); n > 0 {
			if op := re.Sub[n-1].Op; op == syntax.OpEndText || op == syntax.OpEndLine {
				re.Sub = re.Sub[:n-1]
			}
		}
	}
	c := regexConv{pattern: pattern, esc: esc}
	return c.conv(re, 0)
}

type regexConv struct {
	pattern string
	esc     escaper
}

func (c *regexConv) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: regular expression %q: %s", ErrGrammar, c.pattern, fmt.Sprintf(format, args...))
}

func (c *regexConv) conv(re *syntax.Regexp, depth int) (Expr, error) {
	if depth > maxDepth {
		return nil, c.errorf("nested deeper than %d", maxDepth)
	}
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginText, syntax.OpEndText:
		if re.Op != syntax.OpEmptyMatch {
			return nil, c.errorf("anchors are allowed only at the start and the end")
		}
		return Seq{}, nil
	case syntax.OpNoMatch:
		return nil, c.errorf("matches nothing")
	case syntax.OpLiteral:
		var s Seq
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 && unicode.SimpleFold(r) != r {
				var cl []rune
				for f := r; ; {
					cl = append(cl, f, f)
					if f = unicode.SimpleFold(f); f == r {
						break
					}
				}
				e, err := c.class(cl)
				if err != nil {
					return nil, err
				}
				s = append(s, e)
				continue
			}
			s = append(s, c.lit(r))
		}
		if len(s) == 1 {
			return s[0], nil
		}
		return s, nil
	case syntax.OpCharClass:
		return c.class(re.Rune)
	case syntax.OpAnyCharNotNL:
		return c.class([]rune{0, '\n' - 1, '\n' + 1, utf8.MaxRune})
	case syntax.OpAnyChar:
		return c.class([]rune{0, utf8.MaxRune})
	case syntax.OpBeginLine, syntax.OpEndLine:
		return nil, c.errorf("anchors are allowed only at the start and the end")
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return nil, c.errorf(`word boundaries (\b, \B) are not supported`)
	case syntax.OpCapture:
		return c.conv(re.Sub[0], depth+1)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		x, err := c.conv(re.Sub[0], depth+1)
		if err != nil {
			return nil, err
		}
		lo, hi := re.Min, re.Max
		switch re.Op {
		case syntax.OpStar:
			lo, hi = 0, -1
		case syntax.OpPlus:
			lo, hi = 1, -1
		case syntax.OpQuest:
			lo, hi = 0, 1
		}
		if lo > MaxRepeat || hi > MaxRepeat {
			return nil, c.errorf("repetition {%d,%d} exceeds %d", lo, hi, MaxRepeat)
		}
		return Rep{X: x, Min: lo, Max: hi}, nil
	case syntax.OpConcat, syntax.OpAlternate:
		parts := make([]Expr, 0, len(re.Sub))
		for _, s := range re.Sub {
			x, err := c.conv(s, depth+1)
			if err != nil {
				return nil, err
			}
			parts = append(parts, x)
		}
		if re.Op == syntax.OpConcat {
			return Seq(parts), nil
		}
		return Alt(parts), nil
	}
	return nil, c.errorf("operator %v is not supported", re.Op)
}

func (c *regexConv) lit(r rune) Expr {
	if c.esc != nil {
		if s := c.esc(r); s != "" {
			return Lit(s)
		}
	}
	return Lit(string(r))
}

// class turns a regexp/syntax class (pairs lo, hi) into a Class; under an escaper, the
// characters it spells differently leave the class and come back as literals.
func (c *regexConv) class(pairs []rune) (Expr, error) {
	var cl Class
	var alt Alt
	for i := 0; i+1 < len(pairs); i += 2 {
		lo, hi := pairs[i], pairs[i+1]
		if c.esc == nil {
			cl.Ranges = append(cl.Ranges, Range{lo, hi})
			continue
		}
		// Split the range around the characters the escaper rewrites (all below 0x80).
		start := lo
		for r := lo; r <= hi && r < utf8.RuneSelf; r++ {
			if s := c.esc(r); s != "" {
				if r > start {
					cl.Ranges = append(cl.Ranges, Range{start, r - 1})
				}
				alt = append(alt, Lit(s))
				start = r + 1
			}
		}
		if start <= hi {
			cl.Ranges = append(cl.Ranges, Range{start, hi})
		}
	}
	if len(normalize(cl)) > 0 {
		alt = append(Alt{cl}, alt...)
	}
	switch len(alt) {
	case 0:
		return nil, c.errorf("a character class matches nothing")
	case 1:
		return alt[0], nil
	}
	return alt, nil
}
