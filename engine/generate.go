package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/sample"
)

// Finish reasons, as the job result reports them.
const (
	FinishStop      = "stop"      // an end-of-generation token or a stop string
	FinishLength    = "length"    // max tokens, or the session's context is full
	FinishCancelled = "cancelled" // the context was cancelled or its deadline passed
)

// TextStream turns generated ids into text; a tokenizer's streaming decoder does, holding
// back incomplete UTF-8 sequences.
type TextStream interface {
	Next(id int32) string
	Flush() string
}

// Vocabulary is what generation needs to know about tokens.
type Vocabulary interface {
	IsEOG(id int32) bool
}

// GenerateOptions configure Generate.
type GenerateOptions struct {
	MaxTokens int             // at least 1
	Sampler   *sample.Sampler // nil means greedy
	Stop      []string        // stop strings; the text ends before the first one found
	Chunk     int             // prefill chunk; 0 means the whole prompt at once
	Vocab     Vocabulary      // end-of-generation tokens; nil means none
	Stream    TextStream      // required: decodes ids to text
	OnPrefill func(done, total int)
	// CancelEvery bounds the tokens of one prefill forward pass (PrefillOptions.CancelEvery),
	// and so how long a cancellation waits; 0 means the chunk.
	CancelEvery int
	// OnToken is called after each generated token with the count so far and the text that
	// became safe to emit (may be ""), and once more at the end with any text held back.
	OnToken func(generated int, text string)
}

// Generation is the outcome of Generate.
type Generation struct {
	Text             string
	Tokens           []int32 // generated ids, without the end-of-generation token
	FinishReason     string
	PromptTokens     int // prompt tokens prefilled: fewer than the prompt's when ctx ended during prefill
	CompletionTokens int
	Prefill          time.Duration
	Decode           time.Duration
	// Speculation counts the MTP head's drafts (zero without MTP or when sampling).
	Speculation SpecStats
}

// Generate prefills prompt and decodes until an end-of-generation token, a stop string,
// MaxTokens or a full context. When ctx ends it returns what was generated so far with
// FinishCancelled and ctx's error; other errors are engine faults.
func (s *Session) Generate(ctx context.Context, prompt []int32, o GenerateOptions) (Generation, error) {
	g := Generation{PromptTokens: len(prompt)}
	if o.MaxTokens < 1 {
		return g, fmt.Errorf("engine: max tokens must be at least 1, got %d", o.MaxTokens)
	}
	if o.Stream == nil {
		return g, errors.New("engine: generate needs a text stream")
	}
	stops, err := sample.NewStopMatcher(o.Stop)
	if err != nil {
		return g, err
	}
	pick := func(logits []float32) (int32, error) {
		if o.Sampler == nil {
			return sample.Argmax(logits)
		}
		return o.Sampler.Sample(logits)
	}
	// The text grows in a builder and is copied into g once per return: appending to a
	// string per token would copy the whole text every time, quadratic in the output.
	var text strings.Builder
	emit := func(t string) {
		text.WriteString(t)
		if o.OnToken != nil {
			o.OnToken(len(g.Tokens), t)
		}
	}
	cancelled := func(err error) (Generation, error) {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			g.FinishReason = FinishCancelled
			out, _ := stops.Push(o.Stream.Flush())
			emit(out + stops.Flush())
		}
		g.Text = text.String()
		return g, err
	}

	start, pos := time.Now(), s.Pos()
	logits, err := s.Prefill(ctx, prompt, PrefillOptions{Chunk: o.Chunk, CancelEvery: o.CancelEvery, Progress: o.OnPrefill})
	g.Prefill = time.Since(start)
	if err != nil {
		// PromptTokens counts what was prefilled, not what was asked for.
		g.PromptTokens = s.Pos() - pos
		return cancelled(err)
	}

	// With the session's MTP head and greedy sampling a step may feed two tokens: the chosen
	// one and the head's draft of the next, kept when the model agrees — the draft then is
	// the next greedy choice, and ahead holds the logits after it, already in the session.
	drafter, _ := s.m.Graph.(model.Drafter)
	speculative := s.mtp && drafter != nil && (o.Sampler == nil || o.Sampler.Params().Greedy())
	var ahead []float32
	advance := func(id int32) ([]float32, error) {
		if ahead != nil {
			l := ahead
			ahead = nil
			return l, nil
		}
		if speculative {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("engine: decode stopped: %w", err)
			}
			rows, ok, err := s.speculate(drafter, id)
			if err != nil {
				return nil, err
			}
			if s.drafted {
				g.Speculation.Drafted++
				g.Speculation.Passes++
			}
			if ok {
				g.Speculation.Accepted++
				vocab := len(rows) / 2
				ahead = rows[vocab:]
				return rows[:vocab], nil
			}
			g.Speculation.Passes++
		}
		return s.Decode(ctx, id)
	}

	start = time.Now()
	for {
		id, err := pick(logits)
		if err != nil {
			g.Text = text.String()
			return g, fmt.Errorf("engine: sampling token %d: %w", len(g.Tokens), err)
		}
		if o.Vocab != nil && o.Vocab.IsEOG(id) {
			g.FinishReason = FinishStop
			break
		}
		g.Tokens = append(g.Tokens, id)
		g.CompletionTokens = len(g.Tokens)
		out, _ := stops.Push(o.Stream.Next(id))
		emit(out)
		if stops.Hit() {
			g.FinishReason = FinishStop
			break
		}
		fed := s.pos // tokens in the session, not counting an accepted draft not yet chosen
		if ahead != nil {
			fed--
		}
		if len(g.Tokens) >= o.MaxTokens || fed >= s.Capacity() {
			g.FinishReason = FinishLength
			break
		}
		if logits, err = advance(id); err != nil {
			g.Decode = time.Since(start)
			return cancelled(err)
		}
	}
	if !stops.Hit() {
		out, _ := stops.Push(o.Stream.Flush())
		emit(out + stops.Flush())
	}
	g.Decode = time.Since(start)
	g.Text = text.String()
	return g, nil
}
