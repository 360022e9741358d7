package chat

import (
	"fmt"
	"strings"
)

// We do not run Jinja. A template is recognized by its shape: it is cut into literal text and
// tags the way Jinja's lexer does, and each tag is normalized so that formatting (spaces,
// quote style, m['role'] against m.role, 'a' + 'b' against 'ab') does not matter. The
// recognizers then compare tag sequences with the ones they know how to render.

// segment is literal text (tag == 0) or a tag: '{' for {{ expression }}, '%' for
// {% statement %}. Comments are dropped.
type segment struct {
	tag  byte
	body string // text, or the tag's normalized body
}

// lex cuts a template into segments, applying the whitespace control Hugging Face renders
// chat templates with: "-" markers strip whitespace on their side, trim_blocks drops the
// first newline after a statement or comment, lstrip_blocks drops spaces and tabs before a
// statement or comment at the start of a line.
func lex(src string) ([]segment, error) {
	var segs []segment
	text := func(s string) {
		if s != "" {
			segs = append(segs, segment{body: s})
		}
	}
	var pending strings.Builder // text since the last tag
	stripNext, dropNewline := false, false
	for i := 0; i < len(src); {
		open := strings.Index(src[i:], "{")
		if open < 0 || open+1 >= len(src[i:]) {
			pending.WriteString(src[i:])
			break
		}
		kind := src[i+open+1]
		if kind != '{' && kind != '%' && kind != '#' {
			pending.WriteString(src[i : i+open+2])
			i += open + 2
			continue
		}
		pending.WriteString(src[i : i+open])
		start := i + open
		body, end, err := tagBody(src, start, kind)
		if err != nil {
			return nil, err
		}
		leftTrim := strings.HasPrefix(body, "-")
		rightTrim := strings.HasSuffix(body, "-")
		plus := strings.HasPrefix(body, "+")
		if leftTrim || plus {
			body = body[1:]
		}
		if rightTrim && body != "" {
			body = body[:len(body)-1]
		}
		body = strings.TrimSpace(body)

		t := pending.String()
		pending.Reset()
		if stripNext {
			t = strings.TrimLeft(t, " \t\r\n")
		}
		if dropNewline {
			t = strings.TrimPrefix(strings.TrimPrefix(t, "\r"), "\n")
		}
		switch {
		case leftTrim:
			t = strings.TrimRight(t, " \t\r\n")
		case kind != '{' && !plus:
			// lstrip_blocks: only when the tag is the first thing on its line.
			line := t[strings.LastIndexByte(t, '\n')+1:]
			if strings.Trim(line, " \t") == "" {
				t = t[:len(t)-len(line)]
			}
		}
		text(t)
		if kind != '#' {
			segs = append(segs, segment{tag: kindByte(kind), body: normalize(body)})
		}
		stripNext = rightTrim
		dropNewline = kind != '{'
		i = end
	}
	t := pending.String()
	if stripNext {
		t = strings.TrimLeft(t, " \t\r\n")
	}
	if dropNewline {
		t = strings.TrimPrefix(strings.TrimPrefix(t, "\r"), "\n")
	}
	text(t)
	return segs, nil
}

func kindByte(k byte) byte {
	if k == '{' {
		return '{'
	}
	return '%'
}

// tagBody returns the text between the delimiters of the tag at start (whitespace-control
// markers included) and the offset after it. String literals are skipped so that a "%}" inside one does not end the tag.
func tagBody(src string, start int, kind byte) (string, int, error) {
	closer := map[byte]string{'{': "}}", '%': "%}", '#': "#}"}[kind]
	i := start + 2
	if kind == '#' {
		j := strings.Index(src[i:], closer)
		if j < 0 {
			return "", 0, fmt.Errorf("comment at offset %d is not closed", start)
		}
		return src[i : i+j], i + j + 2, nil
	}
	var quote byte
	for ; i < len(src); i++ {
		c := src[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '\'' || c == '"':
			quote = c
		case strings.HasPrefix(src[i:], closer):
			return src[start+2 : i], i + 2, nil
		}
	}
	return "", 0, fmt.Errorf("tag at offset %d is not closed", start)
}

// normalize rewrites a tag body into a canonical spelling: no whitespace outside string
// literals, literals in single quotes, x['name'] as x.name, adjacent literals joined.
func normalize(body string) string {
	type tok struct {
		lit bool
		s   string // a literal's content (escapes kept), or one character
	}
	var toks []tok
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(body) && body[j] != c {
				if body[j] == '\\' {
					j++
				}
				j++
			}
			lit := body[i+1 : min(j, len(body))]
			if c == '"' && strings.Contains(lit, "'") {
				lit = strings.ReplaceAll(lit, "'", `\'`)
			}
			if c == '"' {
				lit = strings.ReplaceAll(lit, `\"`, `"`)
			}
			toks = append(toks, tok{lit: true, s: lit})
			i = j
		default:
			toks = append(toks, tok{s: string(c)})
		}
	}
	// 'a' + 'b' → 'ab'
	for i := 0; i+2 < len(toks); {
		if toks[i].lit && toks[i+1].s == "+" && !toks[i+1].lit && toks[i+2].lit {
			toks[i].s += toks[i+2].s
			toks = append(toks[:i+1], toks[i+3:]...)
			continue
		}
		i++
	}
	var sb strings.Builder
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		// x['name'] → x.name
		if !t.lit && t.s == "[" && i+2 < len(toks) && toks[i+1].lit && isIdent(toks[i+1].s) && toks[i+2].s == "]" && !toks[i+2].lit {
			sb.WriteString("." + toks[i+1].s)
			i += 2
			continue
		}
		if t.lit {
			sb.WriteString("'" + t.s + "'")
		} else {
			sb.WriteString(t.s)
		}
	}
	return sb.String()
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// join spells segments as one string of tags for substring matching; text appears as it is.
func join(segs []segment) string {
	var sb strings.Builder
	for _, s := range segs {
		switch s.tag {
		case '{':
			sb.WriteString("{{" + s.body + "}}")
		case '%':
			sb.WriteString("{%" + s.body + "%}")
		default:
			sb.WriteString(s.body)
		}
	}
	return sb.String()
}
