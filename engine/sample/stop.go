package sample

import (
	"fmt"
	"strings"
)

// StopMatcher watches streamed text for stop strings. Text that could still turn out to be
// the start of a stop string is held back, so a caller that prints what Push returns never
// prints any part of a stop string, even when one spans several tokens.
type StopMatcher struct {
	stops   []string
	pending string // text received but not yet released
	hit     bool
}

// NewStopMatcher returns a matcher for the given stop strings; none may be empty. With no
// stop strings every Push returns its text unchanged.
func NewStopMatcher(stops []string) (*StopMatcher, error) {
	for i, s := range stops {
		if s == "" {
			return nil, fmt.Errorf("sample: stop string %d is empty", i)
		}
	}
	return &StopMatcher{stops: append([]string(nil), stops...)}, nil
}

// Push adds newly decoded text. It returns the text that is now safe to emit and whether a
// stop string has been found; on a hit the returned text ends just before the stop string
// and everything after it is dropped. After a hit, Push returns "", true. If stop strings
// overlap, the one that is complete first wins, however the text is split into pieces.
func (m *StopMatcher) Push(text string) (emit string, hit bool) {
	if m.hit {
		return "", true
	}
	m.pending += text
	if cut := m.firstStop(); cut >= 0 {
		emit, m.pending, m.hit = m.pending[:cut], "", true
		return emit, true
	}
	keep := m.heldBack()
	emit, m.pending = m.pending[:len(m.pending)-keep], m.pending[len(m.pending)-keep:]
	return emit, false
}

// Flush ends the stream: it returns the text still held back (none after a hit).
func (m *StopMatcher) Flush() string {
	out := m.pending
	m.pending = ""
	return out
}

// Hit reports whether a stop string has been found.
func (m *StopMatcher) Hit() bool { return m.hit }

// firstStop is the byte offset in pending where the stop string that completes first
// starts (the longest one if several complete at the same byte), or -1. Deciding by where a
// stop string ends, not where it starts, makes the result independent of how the text was
// split into pieces: it is what a byte-by-byte stream would see first.
func (m *StopMatcher) firstStop() int {
	start, end := -1, 0
	for _, s := range m.stops {
		i := strings.Index(m.pending, s)
		if i < 0 {
			continue
		}
		if e := i + len(s); start < 0 || e < end || e == end && i < start {
			start, end = i, e
		}
	}
	return start
}

// heldBack is the length of the longest suffix of pending that is a proper prefix of some
// stop string: that text might still complete a stop string with the next token.
func (m *StopMatcher) heldBack() int {
	best := 0
	for _, s := range m.stops {
		for n := min(len(s)-1, len(m.pending)); n > best; n-- {
			if strings.HasSuffix(m.pending, s[:n]) {
				best = n
				break
			}
		}
	}
	return best
}
