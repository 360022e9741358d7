package api

import "github.com/redlite/batch/jobs"

// textReader follows a job's text through its progress (jobs.Progress.TextAfter) and then
// its result, handing out each piece once: what it returns, concatenated, is the result's
// text and reasoning.
type textReader struct {
	text, reasoning int // bytes handed out
}

// delta is new text of a job: the SSE "delta" event.
type delta struct {
	Text      string `json:"text,omitempty"`
	Reasoning string `json:"reasoning,omitempty"`
	// Gap says the reader fell more than 64 KiB behind (jobs.ProgressTextMax) and text
	// before this piece was dropped; the result has it all.
	Gap bool `json:"gap,omitempty"`
}

func (d delta) empty() bool { return d.Text == "" && d.Reasoning == "" }

// progress returns the text the progress adds.
func (t *textReader) progress(p jobs.Progress) delta {
	var d delta
	var gt, gr bool
	d.Text, t.text, gt = p.TextAfter(t.text)
	d.Reasoning, t.reasoning, gr = p.ReasoningAfter(t.reasoning)
	d.Gap = gt || gr
	return d
}

// result returns the text the result adds to what the progress showed. A result shorter
// than that (another attempt, which sampled differently) is returned whole, with Gap.
func (t *textReader) result(res jobs.Result) delta {
	var d delta
	d.Text, d.Gap = rest(res.Text, t.text)
	var gap bool
	d.Reasoning, gap = rest(res.Reasoning, t.reasoning)
	d.Gap = d.Gap || gap
	t.text, t.reasoning = len(res.Text), len(res.Reasoning)
	return d
}

func rest(s string, n int) (string, bool) {
	if n > len(s) {
		return s, true
	}
	return s[n:], false
}
