package jobs

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// The progress keeps the last ProgressTextMax bytes of the text, on a character boundary,
// and a reader following it with TextAfter rebuilds the whole text.
func TestProgressTextBounded(t *testing.T) {
	var p Progress
	var whole strings.Builder
	read, got := 0, ""
	piece := "a€" // 1 + 3 bytes: the cut falls inside characters
	for i := 0; i < 40000; i++ {
		p.AppendText(piece, "")
		whole.WriteString(piece)
		if len(p.Text) > ProgressTextMax {
			t.Fatalf("text is %d bytes, above %d", len(p.Text), ProgressTextMax)
		}
		if !utf8.ValidString(p.Text) {
			t.Fatalf("text starts inside a character at offset %d", p.TextOffset)
		}
		if i%7 == 0 { // a reader polling now and then
			d, next, gap := p.TextAfter(read)
			if gap {
				t.Fatalf("reader at %d fell behind offset %d", read, p.TextOffset)
			}
			got += d
			read = next
		}
	}
	d, _, _ := p.TextAfter(read)
	got += d
	if got != whole.String() {
		t.Fatalf("reader rebuilt %d bytes, want %d", len(got), whole.Len())
	}
	if p.TextOffset+len(p.Text) != whole.Len() {
		t.Fatalf("offset %d + %d bytes, want length %d", p.TextOffset, len(p.Text), whole.Len())
	}
	if d, next, gap := p.TextAfter(0); !gap || d != p.Text || next != whole.Len() {
		t.Fatalf("a reader from 0: gap %v, %d bytes, next %d", gap, len(d), next)
	}
}
