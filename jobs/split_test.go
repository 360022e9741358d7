package jobs

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// countTokens stands in for a model's tokenizer: a token per 4 bytes of a word (rounded up),
// one per run of spaces. Like a BPE tokenizer's count, it never shrinks as text grows.
func countTokens(s string) int {
	n, word, inSpace := 0, 0, false
	for _, r := range s {
		if unicode.IsSpace(r) {
			if !inSpace {
				n++
			}
			inSpace, word = true, 0
			continue
		}
		if inSpace || word == 0 || word >= 4 {
			n++
			word = 0
		}
		inSpace = false
		word += utf8.RuneLen(r)
	}
	return n
}

// checkSpans asserts what Split promises for any input.
func checkSpans(t *testing.T, text string, spans []Span, limit, overlap int) {
	t.Helper()
	if len(text) == 0 {
		if len(spans) != 0 {
			t.Fatalf("empty text gave %d spans", len(spans))
		}
		return
	}
	at := 0
	for i, sp := range spans {
		if sp.Start != at || sp.End <= sp.Start || sp.Context > sp.Start || sp.Context < 0 {
			t.Fatalf("span %d %+v after byte %d: spans must follow each other without gap or overlap", i, sp, at)
		}
		if utf8.ValidString(text) && (!utf8.RuneStart(text[sp.Start]) || !utf8.RuneStart(text[sp.Context])) {
			t.Fatalf("span %d %+v begins inside a UTF-8 sequence", i, sp)
		}
		if n := countTokens(text[sp.Context:sp.End]); n > limit {
			t.Fatalf("span %d %+v holds %d tokens, limit %d", i, sp, n, limit)
		}
		if n := countTokens(text[sp.Start:sp.End]); n > limit-overlap {
			t.Fatalf("span %d %+v holds %d tokens of its own, limit %d", i, sp, n, limit-overlap)
		}
		at = sp.End
	}
	if at != len(text) {
		t.Fatalf("spans end at byte %d of %d", at, len(text))
	}
}

func TestSplit(t *testing.T) {
	para := "The committee met on 4 March. It approved a budget of 12,500 euros for the new roof. Anna Berg will lead the work.\n\n"
	doc := "# Minutes\n\n" + strings.Repeat(para, 6) + "## Decisions\n\n" + strings.Repeat(para, 6)

	t.Run("CutsAtHeadingsAndParagraphs", func(t *testing.T) {
		spans, err := Split(doc, countTokens, 120, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkSpans(t, doc, spans, 120, 0)
		if len(spans) < 2 {
			t.Fatalf("%d spans, want several", len(spans))
		}
		for _, sp := range spans[1:] {
			if !strings.HasSuffix(doc[:sp.Start], "\n\n") {
				t.Errorf("a piece begins at byte %d, not after a blank line: %q", sp.Start, doc[max(sp.Start-20, 0):sp.Start+20])
			}
		}
		headings := 0
		for _, sp := range spans {
			if strings.HasPrefix(doc[sp.Start:], "#") {
				headings++
			}
		}
		if headings != 2 {
			t.Errorf("%d pieces begin at a heading, want 2 (the limit holds each section's first paragraphs after it)", headings)
		}
	})
	t.Run("CutsAtSentencesInALongParagraph", func(t *testing.T) {
		text := strings.Repeat("One short sentence here. ", 200)
		spans, err := Split(text, countTokens, 50, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkSpans(t, text, spans, 50, 0)
		for _, sp := range spans[:len(spans)-1] {
			if !strings.HasSuffix(text[:sp.End], ". ") {
				t.Errorf("a piece ends mid-sentence: %q", text[max(sp.End-20, 0):sp.End])
			}
		}
	})
	t.Run("CutsAWordOnlyWhenItIsLongerThanAPiece", func(t *testing.T) {
		text := "a " + strings.Repeat("ü", 300) + " b"
		spans, err := Split(text, countTokens, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkSpans(t, text, spans, 10, 0)
	})
	t.Run("Overlap", func(t *testing.T) {
		spans, err := Split(doc, countTokens, 120, 20)
		if err != nil {
			t.Fatal(err)
		}
		checkSpans(t, doc, spans, 120, 20)
		for _, sp := range spans[1:] {
			if sp.Context >= sp.Start {
				t.Errorf("span %+v repeats nothing of the text before it", sp)
			}
		}
	})
	t.Run("BadLimits", func(t *testing.T) {
		for _, c := range []struct{ limit, overlap int }{{0, 0}, {10, 10}, {10, -1}} {
			if _, err := Split(doc, countTokens, c.limit, c.overlap); err == nil {
				t.Errorf("limit %d overlap %d: no error", c.limit, c.overlap)
			}
		}
	})
}

// FuzzSplit: for any text, limit and overlap, the spans cover the text exactly and in order,
// never begin inside a UTF-8 sequence, and each holds at most the limit.
func FuzzSplit(f *testing.F) {
	f.Add("# A\n\nOne. Two! Three?\nFour\n\n## B\n\nfive six seven", 5, 1)
	f.Add(strings.Repeat("日本語の文。", 40), 7, 2)
	f.Add("\xff\xfe abc \x80\x80 def", 2, 0)
	f.Add(strings.Repeat("x", 100), 3, 0)
	f.Add("", 1, 0)
	f.Fuzz(func(t *testing.T, text string, limit, overlap int) {
		limit = 1 + int(uint(limit)%200)
		overlap = int(uint(overlap) % uint(limit))
		spans, err := Split(text, countTokens, limit, overlap)
		if err != nil {
			t.Fatalf("limit %d overlap %d: %v", limit, overlap, err)
		}
		checkSpans(t, text, spans, limit, overlap)
	})
}
