package planner

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// diff compares want and got as indented JSON and returns "" when they are equal, otherwise
// the differing lines in cmp.Diff's spirit: "-" for want, "+" for got, with two lines of
// context. Report it as t.Errorf("... (-want +got):\n%s", d).
func diff(want, got any) string {
	w, g := jsonLines(want), jsonLines(got)
	// Longest common subsequence table, from the end.
	lcs := make([][]int, len(w)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(g)+1)
	}
	for i := len(w) - 1; i >= 0; i-- {
		for j := len(g) - 1; j >= 0; j-- {
			if w[i] == g[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var lines []line
	i, j := 0, 0
	for i < len(w) || j < len(g) {
		switch {
		case i < len(w) && j < len(g) && w[i] == g[j]:
			lines = append(lines, line{' ', w[i]})
			i, j = i+1, j+1
		case i < len(w) && (j == len(g) || lcs[i+1][j] >= lcs[i][j+1]):
			lines = append(lines, line{'-', w[i]})
			i++
		default:
			lines = append(lines, line{'+', g[j]})
			j++
		}
	}
	const context = 2
	var b strings.Builder
	last := -1
	for k, l := range lines {
		if l.op == ' ' {
			continue
		}
		from := max(k-context, last+1)
		if last >= 0 && from > last+1 {
			b.WriteString("  ...\n")
		}
		for c := from; c < k; c++ {
			fmt.Fprintf(&b, "  %s\n", lines[c].text)
		}
		fmt.Fprintf(&b, "%c %s\n", l.op, l.text)
		last = k
		for c := k + 1; c < len(lines) && c <= k+context && lines[c].op == ' '; c++ {
			fmt.Fprintf(&b, "  %s\n", lines[c].text)
			last = c
		}
	}
	return b.String()
}

func jsonLines(v any) []string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return []string{fmt.Sprintf("%#v", v)}
	}
	return strings.Split(string(b), "\n")
}

func TestDiff(t *testing.T) {
	type pair struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	if d := diff(pair{1, 2}, pair{1, 2}); d != "" {
		t.Errorf("equal values differ:\n%s", d)
	}
	d := diff(pair{1, 2}, pair{1, 3})
	if !strings.Contains(d, `-   "b": 2`) || !strings.Contains(d, `+   "b": 3`) {
		t.Errorf("diff of b=2 vs b=3 is\n%s", d)
	}
}
