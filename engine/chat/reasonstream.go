package chat

import "strings"

// ReasoningStream splits a thinking model's output as it is generated, the way
// SplitReasoning splits the whole text: what Push and Flush return, concatenated, is
// exactly SplitReasoning's answer and reasoning. Text that may still change side (a
// partial <think> or </think>, newlines that the split trims) is held back until it is
// resolved. Each call looks at the new text and what is held back only, never the whole
// output.
type ReasoningStream struct {
	state   int
	held    string // text not yet given out
	started bool   // some reasoning was given out: its leading newlines are gone
}

const (
	rsStart      = iota // before the first non-space text: a <think> may open here
	rsReasoning         // inside the think block
	rsAnswerLead        // after </think>: the answer's leading newlines are trimmed
	rsAnswer            // everything else is answer
)

// NewReasoningStream starts a split; open is OpensThinking of the prompt.
func NewReasoningStream(open bool) *ReasoningStream {
	if open {
		return &ReasoningStream{state: rsReasoning}
	}
	return &ReasoningStream{state: rsStart}
}

// Push takes the next piece of output and returns the answer and reasoning text that
// became certain.
func (s *ReasoningStream) Push(text string) (answer, reasoning string) {
	s.held += text
	for {
		switch s.state {
		case rsStart:
			trimmed := strings.TrimLeft(s.held, " \t\r\n")
			switch {
			case strings.HasPrefix(trimmed, thinkOpen):
				s.held, s.state = trimmed[len(thinkOpen):], rsReasoning
				continue
			case strings.HasPrefix(thinkOpen, trimmed): // "" or a partial <think>
				return answer, reasoning
			}
			s.state = rsAnswer
			continue
		case rsReasoning:
			if !s.started {
				s.held = strings.TrimLeft(s.held, "\n")
			}
			if before, after, ok := strings.Cut(s.held, thinkClose); ok {
				reasoning += strings.TrimRight(before, "\n")
				s.held, s.state = after, rsAnswerLead
				continue
			}
			keep := len(s.held) - partialSuffix(s.held, thinkClose)
			keep = len(strings.TrimRight(s.held[:keep], "\n"))
			if keep > 0 {
				reasoning += s.held[:keep]
				s.held, s.started = s.held[keep:], true
			}
			return answer, reasoning
		case rsAnswerLead:
			s.held = strings.TrimLeft(s.held, "\n")
			if s.held == "" {
				return answer, reasoning
			}
			s.state = rsAnswer
			continue
		default:
			answer += s.held
			s.held = ""
			return answer, reasoning
		}
	}
}

// Flush ends the output and returns what was held back.
func (s *ReasoningStream) Flush() (answer, reasoning string) {
	h := s.held
	s.held = ""
	switch s.state {
	case rsStart:
		return h, "" // only spaces, or a <think> that never completed: answer text
	case rsReasoning: // never closed: all reasoning, trailing newlines trimmed
		return "", strings.TrimRight(h, "\n")
	}
	return "", "" // rsAnswerLead holds only newlines, trimmed; rsAnswer holds nothing
}

// partialSuffix is the length of the longest end of s that is a proper beginning of tag.
func partialSuffix(s, tag string) int {
	for n := min(len(s), len(tag)-1); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}
