package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// GPT-2's byte-to-unicode map: byte-level BPE vocabularies spell every byte as a printable
// character. The printable Latin-1 bytes stand for themselves; the other 68 bytes (controls,
// space, DEL, NBSP, soft hyphen) become U+0100 onwards in byte order, so space is "Ġ" (U+0120).
var (
	byteChars  [256]string // byte → its character, UTF-8 encoded
	charToByte [0x144]int16
)

func init() {
	for i := range charToByte {
		charToByte[i] = -1
	}
	next := rune(0x100)
	for b := range 256 {
		r := rune(b)
		if !(b >= 0x21 && b <= 0x7E || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			r = next
			next++
		}
		byteChars[b] = string(r)
		charToByte[r] = int16(b)
	}
}

// unmapBytes turns a token's byte-level spelling back into the bytes it stands for. A
// character outside the map (which a byte-level vocabulary does not have) is kept as it is.
func unmapBytes(s string) string {
	var sb strings.Builder
	sb.Grow(len(s))
	for _, r := range s {
		if r >= 0 && int(r) < len(charToByte) && charToByte[r] >= 0 {
			sb.WriteByte(byte(charToByte[r]))
		} else {
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// validUTF8 replaces every byte that does not start a valid UTF-8 sequence by U+FFFD, as
// llama.cpp does before splitting text into words.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var sb strings.Builder
	sb.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			sb.WriteString("\uFFFD")
		} else {
			sb.WriteString(s[i : i+n])
		}
		i += n
	}
	return sb.String()
}
