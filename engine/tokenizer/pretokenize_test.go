package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// Each case is worked out by hand from the regex's alternatives, in order.
func TestSplitQwen2(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		// Contractions match case-insensitively and before the letter rule.
		{"I'm it's they'LL WE'VE 'd", []string{"I", "'m", " it", "'s", " they", "'LL", " WE", "'VE", " '", "d"}},
		{"'sam", []string{"'s", "am"}},
		{"'hello", []string{"'hello"}},
		// One non-letter, non-digit, non-newline character may lead a letter run.
		{"\tTab (x) $y", []string{"\tTab", " (", "x", ")", " $", "y"}},
		{"\nx", []string{"\n", "x"}},
		// Digits one at a time, never attached to a space.
		{"a 123", []string{"a", " ", "1", "2", "3"}},
		{"x٣½", []string{"x", "٣", "½"}},
		// Punctuation runs take one leading space and trailing line breaks.
		{"a ...!!\n\nb", []string{"a", " ...!!\n\n", "b"}},
		{"a  ..", []string{"a", " ", " .."}},
		// \s*[\r\n]+ ends at the last line break of a whitespace run.
		{"a \n \n  b", []string{"a", " \n \n", " ", " b"}},
		{"a\r\n\r\n", []string{"a", "\r\n\r\n"}},
		// \s+(?!\S) leaves the last space of a run to the next word; at the end it takes all.
		{"a    b", []string{"a", "   ", " b"}},
		{"a   ", []string{"a", "   "}},
		{"a \u3000b", []string{"a", " ", "\u3000b"}},
		{" ", []string{" "}},
		// Letters of any script, marks are not letters.
		{"naïve café", []string{"naïve", " café"}},
		{"cafe\u0301!", []string{"cafe", "\u0301!"}},
		{"你好，世界", []string{"你好", "，世界"}},
		{"\U0002EBF0x", []string{"\U0002EBF0x"}}, // CJK Extension I (Unicode 15.1) is a letter
		{"🦙 llama", []string{"🦙", " llama"}},
	}
	for _, c := range cases {
		var got []string
		splitQwen2(c.in, func(w string) { got = append(got, w) })
		if !slices.Equal(got, c.want) {
			t.Errorf("split %q = %q, want %q", c.in, got, c.want)
		}
		if strings.Join(got, "") != c.in {
			t.Errorf("split %q loses text", c.in)
		}
	}
}

func TestByteMap(t *testing.T) {
	if byteChars[' '] != "Ġ" || byteChars['\n'] != "Ċ" || byteChars['!'] != "!" || byteChars[0xAD] != "Ń" {
		t.Errorf("space %q newline %q ! %q 0xAD %q", byteChars[' '], byteChars['\n'], byteChars['!'], byteChars[0xAD])
	}
	seen := map[string]bool{}
	for b := range 256 {
		if seen[byteChars[b]] {
			t.Fatalf("byte %#x maps to a repeated character %q", b, byteChars[b])
		}
		seen[byteChars[b]] = true
		if got := unmapBytes(byteChars[b]); got != string([]byte{byte(b)}) {
			t.Errorf("unmap(%q) = %q", byteChars[b], got)
		}
	}
}
