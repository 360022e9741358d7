package daemon

import (
	"fmt"
	"sync"

	"github.com/redlite/batch/engine/sample"
	"github.com/redlite/batch/engine/tokenizer"
	"github.com/redlite/batch/grammar"
	"github.com/redlite/batch/jobs"
)

// maxPrograms bounds the compiled response formats a worker keeps. A Program's states and
// masks are computed lazily and shared by every matcher of it, so the jobs of one batch
// with one schema (a batch file's lines) compute each mask once.
const maxPrograms = 64

// programs caches compiled grammars by their text (grammar.Grammar.String: equal text,
// equal language).
type programs struct {
	mu sync.Mutex
	m  map[string]*grammar.Program
}

// matcher returns a fresh matcher for f over the model's vocabulary, nil for free text.
func (w *worker) matcher(f *jobs.ResponseFormat) (*grammar.Matcher, error) {
	g, err := f.Grammar()
	if err != nil || g == nil {
		return nil, err
	}
	vocab, err := w.lm.m.GrammarVocab()
	if err != nil {
		return nil, fmt.Errorf("grammar vocabulary: %w", err)
	}
	key := g.String()
	w.progs.mu.Lock()
	p := w.progs.m[key]
	w.progs.mu.Unlock()
	if p == nil {
		if p, err = grammar.Compile(g); err != nil {
			return nil, fmt.Errorf("response_format: %w", err)
		}
		w.progs.mu.Lock()
		if w.progs.m == nil || len(w.progs.m) >= maxPrograms {
			w.progs.m = map[string]*grammar.Program{} // the running jobs keep theirs
		}
		if q := w.progs.m[key]; q != nil {
			p = q // another job compiled it meanwhile: share that one
		} else {
			w.progs.m[key] = p
		}
		w.progs.mu.Unlock()
	}
	return grammar.NewMatcher(p, vocab), nil
}

// resultLogprobs turns the engine's logprobs into OpenAI's shape.
func resultLogprobs(tok *tokenizer.Tokenizer, lps []sample.TokenLogprob) *jobs.Logprobs {
	out := &jobs.Logprobs{Content: make([]jobs.TokenLogprob, len(lps))}
	for i, lp := range lps {
		text, b := tokenText(tok, lp.ID)
		c := jobs.TokenLogprob{Token: text, Logprob: float64(lp.Logprob), Bytes: b, TopLogprobs: make([]jobs.TopLogprob, len(lp.Top))}
		for j, alt := range lp.Top {
			t, ab := tokenText(tok, alt.ID)
			c.TopLogprobs[j] = jobs.TopLogprob{Token: t, Logprob: float64(alt.Logprob), Bytes: ab}
		}
		out.Content[i] = c
	}
	return out
}

// tokenText is a token's text and its bytes. A byte-level token may hold part of a UTF-8
// character: the text (JSON) then shows U+FFFD where the bytes are exact.
func tokenText(tok *tokenizer.Tokenizer, id int32) (string, []int) {
	s := tok.Decode([]int32{id})
	b := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = int(s[i])
	}
	return s, b
}
