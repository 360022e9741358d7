package chat

import (
	"testing"
)

// streamSplit feeds text to a ReasoningStream in pieces of the given sizes.
func streamSplit(text string, open bool, sizes []byte) (answer, reasoning string) {
	s := NewReasoningStream(open)
	for i := 0; len(text) > 0; i++ {
		n := 1
		if len(sizes) > 0 {
			n = int(sizes[i%len(sizes)]%9) + 1
		}
		n = min(n, len(text))
		a, r := s.Push(text[:n])
		answer, reasoning, text = answer+a, reasoning+r, text[n:]
	}
	a, r := s.Flush()
	return answer + a, reasoning + r
}

var reasoningCases = []string{
	"Plain answer.", "<think>\nsteps\n</think>\n\nThe answer.", "steps\n</think>\n\nThe answer.",
	"still thinking", "<think>\nunfinished", "<think>\n\n</think>\n\nAnswer.",
	"Answer mentions </think> late.", "  \n<think>a</thin b\n\n</think>\n", "<thin", " \n",
	"<think>x</think", "\n\n</think>\n\n\n", "<think></think>", "</think>x</think>y",
}

func TestReasoningStreamMatchesSplit(t *testing.T) {
	for _, text := range reasoningCases {
		for _, open := range []bool{false, true} {
			wa, wr := SplitReasoning(text, open)
			for _, sizes := range [][]byte{nil, {2}, {3, 0, 7}, {8}} {
				if a, r := streamSplit(text, open, sizes); a != wa || r != wr {
					t.Errorf("%q open %v pieces %v: streamed %q, %q; SplitReasoning %q, %q", text, open, sizes, a, r, wa, wr)
				}
			}
		}
	}
}

func FuzzReasoningStream(f *testing.F) {
	for _, text := range reasoningCases {
		f.Add(text, false, []byte{1, 4})
		f.Add(text, true, []byte{2})
	}
	f.Fuzz(func(t *testing.T, text string, open bool, sizes []byte) {
		wa, wr := SplitReasoning(text, open)
		if a, r := streamSplit(text, open, sizes); a != wa || r != wr {
			t.Fatalf("%q open %v pieces %v: streamed %q, %q; SplitReasoning %q, %q", text, open, sizes, a, r, wa, wr)
		}
	})
}
