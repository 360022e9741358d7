package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of the pre-tokenizer regex: \p{L}, \p{N} and \s. A character in none of
// them is "other" (punctuation, symbols, marks, controls, unassigned).
const (
	clsLetter uint8 = 1 << iota
	clsNumber
	clsSpace
)

var asciiClass [128]uint8

func init() {
	for c := range 128 {
		r := rune(c)
		switch {
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			asciiClass[c] = clsLetter
		case r >= '0' && r <= '9':
			asciiClass[c] = clsNumber
		case r == ' ' || r >= '\t' && r <= '\r':
			asciiClass[c] = clsSpace
		}
	}
}

// class follows llama.cpp's Unicode tables. Go's tables are Unicode 15.0; llama.cpp's are
// newer and add one letter block, CJK Extension I (Unicode 15.1). Its whitespace set is
// Go's unicode.IsSpace exactly.
func class(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r) || r >= 0x2EBF0 && r <= 0x2EE5D:
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return 0
}

func runeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// asciiLower folds only ASCII: no other character lowercases to a letter of the contractions.
func asciiLower(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// splitQwen2 cuts valid UTF-8 text into the words of the Qwen2 pre-tokenizer regex
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// which Go's regexp cannot express (the lookahead). Each step tries the alternatives in the
// regex's order at the current position and takes the first that matches, as a backtracking
// regex engine does.
func splitQwen2(s string, emit func(word string)) {
	for p := 0; p < len(s); {
		end := qwen2Word(s, p)
		emit(s[p:end])
		p = end
	}
}

// qwen2Word returns the end of the word that starts at p.
func qwen2Word(s string, p int) int {
	r, n := runeAt(s, p)
	q := p + n
	c := class(r)

	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' && q < len(s) {
		r1, n1 := runeAt(s, q)
		switch l1 := asciiLower(r1); l1 {
		case 's', 't', 'm', 'd':
			return q + n1
		case 'r', 'v', 'l':
			if q+n1 < len(s) {
				r2, n2 := runeAt(s, q+n1)
				l2 := asciiLower(r2)
				if l2 == 'e' && (l1 == 'r' || l1 == 'v') || l1 == 'l' && l2 == 'l' {
					return q + n1 + n2
				}
			}
		}
	}

	// [^\r\n\p{L}\p{N}]?\p{L}+
	if r != '\r' && r != '\n' && c != clsNumber {
		start := -1
		if c == clsLetter {
			start = q
		} else if q < len(s) {
			if r1, n1 := runeAt(s, q); class(r1) == clsLetter {
				start = q + n1
			}
		}
		if start >= 0 {
			for start < len(s) {
				r1, n1 := runeAt(s, start)
				if class(r1) != clsLetter {
					break
				}
				start += n1
			}
			return start
		}
	}

	// \p{N}, one digit at a time
	if c == clsNumber {
		return q
	}

	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	t := p
	if r == ' ' {
		t = q
	}
	if t < len(s) {
		if rt, nt := runeAt(s, t); class(rt) == 0 {
			t += nt
			for t < len(s) {
				rt, nt = runeAt(s, t)
				if class(rt) != 0 {
					break
				}
				t += nt
			}
			for t < len(s) && (s[t] == '\r' || s[t] == '\n') {
				t++
			}
			return t
		}
	}

	// The three whitespace alternatives, from one scan of the whitespace run.
	count, lastStart, afterNewline := 0, p, -1
	t = p
	for t < len(s) {
		rt, nt := runeAt(s, t)
		if class(rt) != clsSpace {
			break
		}
		if rt == '\r' || rt == '\n' {
			afterNewline = t + nt
		}
		lastStart = t
		t += nt
		count++
	}
	switch {
	case afterNewline >= 0: // \s*[\r\n]+ ends at the run's last line break
		return afterNewline
	case count > 1 && t < len(s): // \s+(?!\S) leaves the last space to the next word
		return lastStart
	case count > 0: // \s+
		return t
	}
	return q
}
