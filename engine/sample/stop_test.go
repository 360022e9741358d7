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
		// "c" is complete before "bcd", so it wins even though "bcd" starts earlier.
		{"OverlappingStops", []string{"c", "bcd"}, []string{"a", "bcd"}, "ab", true},
		{"OverlappingStopsOnePiece", []string{"c", "bcd"}, []string{"abcd"}, "ab", true},
		{"SameEndLongestWins", []string{"d", "cd"}, []string{"abcd"}, "ab", true},
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

// FuzzStopMatcher splits a text into pieces at arbitrary points: what is emitted must be the
// text up to the stop string that completes first (or all of it), and never more at any
// step.
func FuzzStopMatcher(f *testing.F) {
	f.Add("hello <|im_end|> world", "<|im_end|>", "lo", uint8(3))
	f.Add("aaab", "aab", "b", uint8(1))
	f.Fuzz(func(t *testing.T, text, stop1, stop2 string, step uint8) {
		var stops []string
		for _, s := range []string{stop1, stop2} {
			if s != "" {
				stops = append(stops, s)
			}
		}
		m, err := NewStopMatcher(stops)
		if err != nil {
			t.Fatal(err)
		}
		want, wantHit := text, false
		for e := 1; e <= len(text) && !wantHit; e++ {
			for _, s := range stops {
				if strings.HasSuffix(text[:e], s) && (!wantHit || e-len(s) < len(want)) {
					want, wantHit = text[:e-len(s)], true
				}
			}
		}
		n := int(step%7) + 1
		var out strings.Builder
		hit := false
		for i := 0; i < len(text) && !hit; i += n {
			var emit string
			emit, hit = m.Push(text[i:min(i+n, len(text))])
			out.WriteString(emit)
			if !strings.HasPrefix(want, out.String()) {
				t.Fatalf("emitted %q, which is not a prefix of %q", out.String(), want)
			}
		}
		out.WriteString(m.Flush())
		if out.String() != want || hit != wantHit {
			t.Fatalf("emitted %q (hit %v), want %q (hit %v)", out.String(), hit, want, wantHit)
		}
	})
}
