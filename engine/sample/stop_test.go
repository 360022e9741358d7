package sample

import (
	"strings"
	"testing"
)

// stream feeds pieces one at a time and returns everything emitted and whether it hit.
func stream(t *testing.T, stops []string, pieces ...string) (string, bool) {
	t.Helper()
	m, err := NewStopMatcher(stops)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, p := range pieces {
		emit, hit := m.Push(p)
		out.WriteString(emit)
		if hit {
			if more, again := m.Push("anything"); more != "" || !again {
				t.Fatalf("Push after a hit = %q, %v", more, again)
			}
			if f := m.Flush(); f != "" {
				t.Fatalf("Flush after a hit = %q", f)
			}
			return out.String(), true
		}
	}
	out.WriteString(m.Flush())
	return out.String(), false
}

func TestStopMatcher(t *testing.T) {
	tests := []struct {
		name   string
		stops  []string
		pieces []string
		want   string
		hit    bool
	}{
		{"NoStops", nil, []string{"a", "b"}, "ab", false},
		{"NoHit", []string{"END"}, []string{"hello ", "world"}, "hello world", false},
		{"WithinOnePiece", []string{"END"}, []string{"abcENDxyz"}, "abc", true},
		{"SpansPieces", []string{"<|im_end|>"}, []string{"Hi", "<|im", "_", "end|>", "tail"}, "Hi", true},
		{"OneBytePieces", []string{"stop"}, strings.Split("xxstopyy", ""), "xx", true},
		{"FalseStartReleased", []string{"END"}, []string{"EN", "x", "y"}, "ENxy", false},
		{"FalseStartThenHit", []string{"END"}, []string{"EN", "EN", "D"}, "EN", true},
		{"PrefixHeldAtEndIsFlushed", []string{"END"}, []string{"abcEN"}, "abcEN", false},
		{"EarliestOfSeveral", []string{"zz", "b"}, []string{"abzz"}, "a", true},
		{"OverlappingStops", []string{"c", "bcd"}, []string{"a", "bcd"}, "a", true},
		{"StopAtStart", []string{"\n\n"}, []string{"\n", "\n", "more"}, "", true},
		{"Unicode", []string{"停止"}, []string{"好的", "停", "止了"}, "好的", true},
		{"EmptyPieces", []string{"x"}, []string{"", "a", "", "x"}, "a", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, hit := stream(t, tt.stops, tt.pieces...)
			if got != tt.want || hit != tt.hit {
				t.Fatalf("got %q, hit %v; want %q, hit %v", got, hit, tt.want, tt.hit)
			}
		})
	}
}

// TestStopNeverEmitsPartial streams text one byte at a time: the emitted text must never
// reach into the stop string, even when earlier near-misses had to be held back.
func TestStopNeverEmitsPartial(t *testing.T) {
	const stop = "</answer>"
	text := "some </ans text </answ and </answer> after"
	at := strings.Index(text, stop)
	m, _ := NewStopMatcher([]string{stop})
	var out strings.Builder
	hit := false
	for i := 0; i < len(text) && !hit; i++ {
		var emit string
		emit, hit = m.Push(text[i : i+1])
		out.WriteString(emit)
		if out.Len() > at {
			t.Fatalf("after byte %d emitted %q, which reaches into the stop string", i, out.String())
		}
	}
	if !hit || out.String() != text[:at] {
		t.Fatalf("emitted %q (hit %v), want %q", out.String(), hit, text[:at])
	}
}

func TestStopMatcherRejectsEmpty(t *testing.T) {
	if _, err := NewStopMatcher([]string{"a", ""}); err == nil || !strings.Contains(err.Error(), "stop string 1") {
		t.Fatalf("err = %v, want one naming stop string 1", err)
	}
}
