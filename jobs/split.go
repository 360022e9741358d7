package jobs

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Boundary ranks: where a cut between two pieces of a document is best made. A piece ends at
// the best-ranked boundary in the later half of the text that fits; only a word longer than a
// whole piece is cut inside, and then between two characters, never inside one.
const (
	rankRune      = iota // between two characters
	rankWord             // after the spaces that end a word
	rankSentence         // after a sentence's end (. ! ? and their CJK forms)
	rankLine             // at the start of a line
	rankParagraph        // after a blank line
	rankHeading          // at a line that opens with a Markdown heading (#)
)

// ErrPieceTooSmall is returned by Split when the limit cannot hold a single character.
var ErrPieceTooSmall = errors.New("the token limit of a piece cannot hold one character")

// Split cuts text into consecutive spans that together cover it exactly, each holding at
// most limit tokens as count measures them (the model's tokenizer; counting is assumed to
// grow with the text, which a BPE tokenizer does but for a token at the seam, so every span
// chosen is counted again). With overlap > 0, every span after the first also carries up to
// overlap tokens of the text before it (Context < Start, at a word boundary); Start…End
// then holds at most limit−overlap tokens so that the whole still fits.
func Split(text string, count func(string) int, limit, overlap int) ([]Span, error) {
	if limit < 1 {
		return nil, fmt.Errorf("split: limit must be at least 1 token, got %d", limit)
	}
	if overlap < 0 || overlap >= limit {
		return nil, fmt.Errorf("split: overlap must be between 0 and limit-1 (%d), got %d", limit-1, overlap)
	}
	core := limit - overlap
	ranks := boundaryRanks(text)
	var spans []Span
	for start := 0; start < len(text); {
		end, err := pieceEnd(text, ranks, start, core, count)
		if err != nil {
			return nil, err
		}
		sp := Span{Start: start, End: end, Context: start}
		if overlap > 0 && start > 0 {
			sp.Context = overlapStart(text, ranks, start, overlap, count)
			if sp.Context < start && count(text[sp.Context:end]) > limit {
				sp.Context = start // the seam cost a token: drop the overlap rather than exceed
			}
		}
		spans = append(spans, sp)
		start = end
	}
	return spans, nil
}

// pieceEnd is where the piece that begins at start ends: the farthest character boundary
// whose text fits, moved back to the best boundary in the later half of the piece.
func pieceEnd(text string, ranks []int8, start, limit int, count func(string) int) (int, error) {
	fits := func(end int) bool { return count(text[start:end]) <= limit }
	if fits(len(text)) {
		return len(text), nil
	}
	// Gallop to a length that does not fit, then bisect: the text's token count is about
	// proportional to its length, so this counts O(log n) prefixes of about a piece each.
	lo, hi := start, start+4*limit
	for hi < len(text) && fits(runeStart(text, hi)) {
		lo, hi = runeStart(text, hi), start+2*(hi-start)
	}
	hi = min(hi, len(text))
	for hi-lo > 1 {
		mid := runeStart(text, lo+(hi-lo)/2)
		if mid <= lo {
			mid = nextRune(text, lo)
			if mid >= hi {
				break
			}
		}
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	for {
		if lo <= start {
			return 0, fmt.Errorf("split at byte %d: %w (limit %d tokens)", start, ErrPieceTooSmall, limit)
		}
		end := bestBoundary(ranks, start, lo)
		if fits(end) {
			return end, nil
		}
		lo = end - 1 // a seam token made it too long: look before it
		for lo > start && !utf8.RuneStart(text[lo]) {
			lo--
		}
	}
}

// bestBoundary picks the cut in (start, end]: the latest of the best rank found in the later
// half, or in the whole piece when the later half has only character boundaries.
func bestBoundary(ranks []int8, start, end int) int {
	pick := func(from int) (int, int8) {
		best, at := int8(-1), end
		for p := end; p > from; p-- {
			if ranks[p] > best {
				best, at = ranks[p], p
			}
		}
		return at, best
	}
	at, r := pick(start + (end-start)/2)
	if r <= rankRune {
		at, _ = pick(start)
	}
	return at
}

// overlapStart is the earliest word boundary before start whose text up to start holds at
// most overlap tokens (start itself when none does).
func overlapStart(text string, ranks []int8, start, overlap int, count func(string) int) int {
	best := start
	for p := start - 1; p >= 0 && start-p <= 8*overlap; p-- {
		if ranks[p] < rankWord && p != 0 {
			continue
		}
		if count(text[p:start]) > overlap {
			break
		}
		best = p
	}
	return best
}

// boundaryRanks gives each byte offset of text the rank of a cut there; offsets inside a
// UTF-8 sequence get -1, so no cut can land there. ranks[len(text)] is the end.
func boundaryRanks(text string) []int8 {
	ranks := make([]int8, len(text)+1)
	for i := range ranks {
		ranks[i] = -1
	}
	ranks[0], ranks[len(text)] = rankHeading, rankHeading
	var prev rune = -1
	newlines := 0 // in the run of spaces before this character
	sentenceEnd := false
	for i, r := range text {
		rank := int8(rankRune)
		switch {
		case i == 0:
			rank = rankHeading
		case unicode.IsSpace(r):
			// Inside a run of spaces: cut only after it, before the next word.
		case unicode.IsSpace(prev):
			rank = rankWord
			if sentenceEnd {
				rank = rankSentence
			}
			if newlines >= 1 {
				rank = rankLine
			}
			if newlines >= 2 {
				rank = rankParagraph
			}
			if newlines >= 1 && r == '#' {
				rank = rankHeading
			}
		case prev == '。' || prev == '！' || prev == '？':
			rank = rankSentence
		}
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(text[i:]); n == 1 {
				rank = rankRune // invalid bytes: each is its own character
			}
		}
		ranks[i] = rank
		if unicode.IsSpace(r) {
			if r == '\n' {
				newlines++
			}
		} else {
			newlines = 0
			sentenceEnd = r == '.' || r == '!' || r == '?' || r == '。' || r == '！' || r == '？'
		}
		prev = r
	}
	return ranks
}

// runeStart moves i back to the start of the character it is in.
func runeStart(text string, i int) int {
	if i >= len(text) {
		return len(text)
	}
	for i > 0 && !utf8.RuneStart(text[i]) {
		i--
	}
	return i
}

func nextRune(text string, i int) int {
	_, n := utf8.DecodeRuneInString(text[i:])
	return i + max(n, 1)
}
