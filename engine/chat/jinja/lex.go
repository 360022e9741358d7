package jinja

import (
	"fmt"
	"strings"
)

// A template is first cut into pieces: literal text, {{ expressions }} and {% statements %}
// (comments are dropped), with whitespace control applied the way Hugging Face configures
// jinja2 for chat templates: "-" markers strip all whitespace on their side, trim_blocks drops
// the first newline after a statement or comment, lstrip_blocks drops the spaces and tabs
// that precede a statement or comment at the start of a line ("+" turns that off), and a
// single trailing newline of the source is dropped (keep_trailing_newline=False).

type pieceKind uint8

const (
	pieceText pieceKind = iota
	pieceExpr
	pieceStmt
	pieceComment // dropped once whitespace control is applied
)

type piece struct {
	kind pieceKind
	text string  // literal text
	toks []token // the tag's tokens
	line int     // where the piece starts

	// Whitespace control of a tag: "-" or "+" just inside its opening and closing delimiter.
	leftStrip, leftPlus, rightStrip, rightPlus bool
	// lineStart: the text starts at the beginning of a line of the source.
	lineStart bool
	// raw: a {% raw %} tag, which trim_blocks leaves alone (jinja2 keeps the newline after it).
	raw bool
}

func (p *piece) block() bool { return p.kind == pieceStmt || p.kind == pieceComment }

// cut splits src into pieces and applies whitespace control.
func cut(src string) ([]piece, error) {
	raw, err := scan(strings.TrimSuffix(src, "\n"))
	if err != nil {
		return nil, err
	}
	out := raw[:0:0]
	for i := range raw {
		p := raw[i]
		if p.kind == pieceComment {
			continue
		}
		if p.kind != pieceText {
			out = append(out, p)
			continue
		}
		t := p.text
		lineStart := p.lineStart
		if i > 0 {
			prev := &raw[i-1]
			switch {
			case prev.rightStrip:
				t = strings.TrimLeft(t, " \t\r\n\f\v")
			case prev.block() && !prev.rightPlus && !prev.raw && strings.HasPrefix(t, "\n"):
				t, lineStart = t[1:], true // trim_blocks
			}
		}
		if i+1 < len(raw) {
			next := &raw[i+1]
			switch {
			case next.leftStrip:
				t = strings.TrimRight(t, " \t\r\n\f\v")
			case next.block() && !next.leftPlus:
				// lstrip_blocks: spaces and tabs between a line start and the tag go.
				l := strings.LastIndexByte(t, '\n') + 1
				if (l > 0 || lineStart) && strings.Trim(t[l:], " \t") == "" {
					t = t[:l]
				}
			}
		}
		// jinja2 normalizes the newlines of template data.
		t = strings.ReplaceAll(strings.ReplaceAll(t, "\r\n", "\n"), "\r", "\n")
		if t != "" {
			p.text = t
			out = append(out, p)
		}
	}
	return out, nil
}

// scan cuts src into text, tags and comments, recording each tag's whitespace markers.
func scan(src string) ([]piece, error) {
	var out []piece
	line := 1
	text := func(s string, at int) {
		if s != "" {
			out = append(out, piece{kind: pieceText, text: s, line: line, lineStart: at == 0 || src[at-1] == '\n'})
			line += strings.Count(s, "\n")
		}
	}
	i := 0
	for i < len(src) {
		j := nextTag(src, i)
		if j < 0 {
			text(src[i:], i)
			break
		}
		text(src[i:j], i)
		p := piece{line: line}
		body := j + 2
		if body < len(src) && (src[body] == '-' || src[body] == '+') {
			p.leftStrip, p.leftPlus = src[body] == '-', src[body] == '+'
			body++
		}
		switch src[j+1] {
		case '#':
			end := strings.Index(src[body:], "#}")
			if end < 0 {
				return nil, &Error{Kind: "TemplateSyntaxError", Line: line, Msg: "comment not closed"}
			}
			inner := src[body : body+end]
			p.kind = pieceComment
			p.rightStrip = strings.HasSuffix(inner, "-")
			p.rightPlus = strings.HasSuffix(inner, "+")
			line += strings.Count(src[j:body+end+2], "\n")
			i = body + end + 2
			out = append(out, p)
			continue
		case '{':
			p.kind = pieceExpr
		default:
			p.kind = pieceStmt
		}
		closer := "}}"
		if p.kind == pieceStmt {
			closer = "%}"
		}
		toks, end, err := lexTag(src, body, closer, line)
		if err != nil {
			return nil, err
		}
		if n := len(toks); n > 0 && toks[n-1].kind == tokOp && (toks[n-1].s == "-" || toks[n-1].s == "+") && src[end-1] == toks[n-1].s[0] {
			p.rightStrip, p.rightPlus = toks[n-1].s == "-", toks[n-1].s == "+"
			toks = toks[:n-1]
		}
		p.toks = toks
		line += strings.Count(src[j:end+2], "\n")
		i = end + 2
		out = append(out, p)
		if p.kind == pieceStmt && len(toks) == 1 && toks[0].kind == tokName && toks[0].s == "raw" {
			// {% raw %}…{% endraw %}: the text between is literal.
			contentEnd, endTag, err := findEndRaw(src, i, line)
			if err != nil {
				return nil, err
			}
			// Both tags stay for whitespace control, as comments: nothing to parse.
			out[len(out)-1].kind, out[len(out)-1].toks, out[len(out)-1].raw = pieceComment, nil, true
			text(src[i:contentEnd], i)
			endTag.kind = pieceComment
			out = append(out, endTag.piece)
			line += strings.Count(src[contentEnd:endTag.end], "\n")
			i = endTag.end
		}
	}
	return out, nil
}

// nextTag finds the next "{{", "{%" or "{#" at or after i.
func nextTag(src string, i int) int {
	for {
		j := strings.IndexByte(src[i:], '{')
		if j < 0 || i+j+1 >= len(src) {
			return -1
		}
		if c := src[i+j+1]; c == '{' || c == '%' || c == '#' {
			return i + j
		}
		i += j + 1
	}
}

// rawEnd is the {% endraw %} tag that closes a raw block.
type rawEnd struct {
	piece
	end int
}

// findEndRaw finds the {% endraw %} closing a raw block whose content starts at from.
func findEndRaw(src string, from, line int) (int, rawEnd, error) {
	for k := from; ; {
		j := strings.Index(src[k:], "{%")
		if j < 0 {
			return 0, rawEnd{}, &Error{Kind: "TemplateSyntaxError", Line: line, Msg: "raw block not closed (missing endraw)"}
		}
		p := rawEnd{piece: piece{kind: pieceStmt, line: line}}
		q := k + j + 2
		if q < len(src) && (src[q] == '-' || src[q] == '+') {
			p.leftStrip, p.leftPlus = src[q] == '-', src[q] == '+'
			q++
		}
		rest := strings.TrimLeft(src[q:], " \t\r\n")
		if strings.HasPrefix(rest, "endraw") {
			tail := strings.TrimLeft(rest[len("endraw"):], " \t\r\n")
			if strings.HasPrefix(tail, "-") || strings.HasPrefix(tail, "+") {
				p.rightStrip, p.rightPlus = tail[0] == '-', tail[0] == '+'
				tail = tail[1:]
			}
			if strings.HasPrefix(tail, "%}") {
				p.end = len(src) - len(tail) + 2
				return k + j, p, nil
			}
		}
		k += j + 2
	}
}

type tokKind uint8

const (
	tokName tokKind = iota
	tokString
	tokInt
	tokFloat
	tokOp
)

type token struct {
	kind tokKind
	s    string // name, decoded string, number text or operator
	line int
}

func (t token) String() string {
	switch t.kind {
	case tokString:
		return fmt.Sprintf("%q", t.s)
	}
	return t.s
}

var operators = []string{"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"}

// lexTag tokenizes a tag's body from offset i up to closer, skipping string literals so that
// a closer inside one does not end the tag. It returns the tokens and the closer's offset.
func lexTag(src string, i int, closer string, line int) ([]token, int, error) {
	var toks []token
	depth := 0 // brackets open: "}}" inside {{ {'a': {}} }} does not close
	for i < len(src) {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case depth == 0 && strings.HasPrefix(src[i:], closer):
			return toks, i, nil
		case c == '-' && strings.HasPrefix(src[i+1:], closer) && depth == 0:
			toks = append(toks, token{kind: tokOp, s: "-", line: line})
			return toks, i + 1, nil
		case c == '\'' || c == '"':
			s, n, err := lexString(src[i:], line)
			if err != nil {
				return nil, 0, err
			}
			toks = append(toks, token{kind: tokString, s: s, line: line})
			line += strings.Count(src[i:i+n], "\n")
			i += n
		case c >= '0' && c <= '9':
			j := i
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '_') {
				j++
			}
			kind := tokInt
			if j+1 < len(src) && src[j] == '.' && src[j+1] >= '0' && src[j+1] <= '9' {
				kind = tokFloat
				j++
				for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '_') {
					j++
				}
			}
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				k := j + 1
				if k < len(src) && (src[k] == '+' || src[k] == '-') {
					k++
				}
				if k < len(src) && src[k] >= '0' && src[k] <= '9' {
					kind = tokFloat
					for j = k; j < len(src) && src[j] >= '0' && src[j] <= '9'; j++ {
					}
				}
			}
			toks = append(toks, token{kind: kind, s: strings.ReplaceAll(src[i:j], "_", ""), line: line})
			i = j
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(src) && (src[j] == '_' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9') {
				j++
			}
			toks = append(toks, token{kind: tokName, s: src[i:j], line: line})
			i = j
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(src[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, 0, &Error{Kind: "TemplateSyntaxError", Line: line, Msg: fmt.Sprintf("unexpected character %q", rune(c))}
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				depth--
			}
			toks = append(toks, token{kind: tokOp, s: op, line: line})
			i += len(op)
		}
	}
	return nil, 0, &Error{Kind: "TemplateSyntaxError", Line: line, Msg: fmt.Sprintf("tag not closed (missing %q)", closer)}
}

// lexString decodes a quoted literal at the start of s with Python's escapes and returns it
// and its length in s.
func lexString(s string, line int) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == q:
			return b.String(), i + 1, nil
		case c == '\\' && i+1 < len(s):
			i++
			switch e := s[i]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '\\', '\'', '"':
				b.WriteByte(e)
			case '0':
				b.WriteByte(0)
			case 'a':
				b.WriteByte(7)
			case 'b':
				b.WriteByte(8)
			case 'f':
				b.WriteByte(12)
			case 'v':
				b.WriteByte(11)
			case '\n':
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if i+n >= len(s) {
					return "", 0, &Error{Kind: "TemplateSyntaxError", Line: line, Msg: "truncated \\" + string(e) + " escape"}
				}
				var r rune
				for _, h := range s[i+1 : i+1+n] {
					d := hexDigit(h)
					if d < 0 {
						return "", 0, &Error{Kind: "TemplateSyntaxError", Line: line, Msg: "bad \\" + string(e) + " escape"}
					}
					r = r<<4 | rune(d)
				}
				b.WriteRune(r)
				i += n
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, &Error{Kind: "TemplateSyntaxError", Line: line, Msg: "string literal not closed"}
}

func hexDigit(c rune) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
