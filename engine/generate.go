package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/sample"
	"github.com/redlite/batch/grammar"
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
	// Grammar, when set, constrains the output: each step's logits are masked to the tokens
	// that continue it, end-of-generation tokens only where it may end, and the generation
	// stops (FinishStop) when it is complete. One Matcher per generation.
	Grammar *grammar.Matcher
	// Logprobs asks for each generated token's log-probability and TopLogprobs (0 to
	// sample.MaxTopLogprobs) alternatives in Generation.Logprobs.
	Logprobs    bool
	TopLogprobs int
}

// Generation is the outcome of Generate.
type Generation struct {
	Text         string
	Tokens       []int32 // generated ids, without the end-of-generation token
	FinishReason string
	PromptTokens int // prompt tokens prefilled: fewer than the prompt's when ctx ended during prefill
	// CachedTokens of them came from the prefix cache instead of being computed.
	CachedTokens     int
	CompletionTokens int
	Prefill          time.Duration
	Decode           time.Duration
	// Queued is the time a Scheduler's sequence waited for a slot and KV blocks; Batch is
	// the most sequences that ran in one of its steps.
	Queued time.Duration
	Batch  int
	// Speculation counts the MTP head's drafts (zero without MTP or when sampling).
	Speculation SpecStats
	// Logprobs has one entry per token of Tokens when GenerateOptions.Logprobs is set: the
	// log-softmax of the logits the token was drawn from after the penalties and the
	// grammar's mask, before temperature and the top-k/top-p/min-p filters.
	Logprobs []sample.TokenLogprob
}

// generation is one sequence's output as it is sampled: the sampler, end-of-generation
// tokens, stop strings, streamed text and limits. Session.Generate and the Scheduler drive
// it the same way: pick a token from the logits, accept it, and feed it unless accept says
// the generation is over.
type generation struct {
	o     GenerateOptions
	stops *sample.StopMatcher
	// The text grows in a builder and is copied into g once at the end: appending to a
	// string per token would copy the whole text every time, quadratic in the output.
	text strings.Builder
	g    Generation
	buf  []float32 // the step's logits after penalties and the grammar's mask
}

func newGeneration(o GenerateOptions, promptTokens int) (*generation, error) {
	t := &generation{o: o, g: Generation{PromptTokens: promptTokens}}
	if o.MaxTokens < 1 {
		return t, fmt.Errorf("engine: max tokens must be at least 1, got %d", o.MaxTokens)
	}
	if o.Stream == nil {
		return t, errors.New("engine: generate needs a text stream")
	}
	if o.TopLogprobs < 0 || o.TopLogprobs > sample.MaxTopLogprobs {
		return t, fmt.Errorf("engine: top logprobs must be in [0, %d], got %d", sample.MaxTopLogprobs, o.TopLogprobs)
	}
	var err error
	t.stops, err = sample.NewStopMatcher(o.Stop)
	return t, err
}

// pick samples the next token from logits (left as they are: penalties and the grammar's
// mask work on a copy) and advances the grammar over it.
func (t *generation) pick(logits []float32) (int32, error) {
	penalized := t.o.Sampler != nil && t.o.Sampler.Params().Penalized()
	if penalized || t.o.Grammar != nil {
		t.buf = append(t.buf[:0], logits...)
		logits = t.buf
		if penalized {
			t.o.Sampler.Penalize(logits)
		}
		if t.o.Grammar != nil {
			if err := t.o.Grammar.Mask(logits); err != nil {
				return 0, fmt.Errorf("engine: token %d: %w", len(t.g.Tokens), err)
			}
		}
	}
	var id int32
	var err error
	if t.o.Sampler == nil {
		id, err = sample.Argmax(logits)
	} else {
		id, err = t.o.Sampler.Sample(logits)
	}
	if err != nil {
		if t.o.Grammar != nil && errors.Is(err, sample.ErrNoCandidates) {
			return 0, fmt.Errorf("engine: sampling token %d: no token of the vocabulary continues the grammar: %w", len(t.g.Tokens), err)
		}
		return 0, fmt.Errorf("engine: sampling token %d: %w", len(t.g.Tokens), err)
	}
	if t.o.Logprobs {
		t.g.Logprobs = append(t.g.Logprobs, sample.Logprobs(logits, id, t.o.TopLogprobs))
	}
	if t.o.Grammar != nil {
		if err := t.o.Grammar.Accept(id); err != nil {
			return 0, fmt.Errorf("engine: token %d: %w", len(t.g.Tokens), err)
		}
	}
	if t.o.Sampler != nil {
		t.o.Sampler.Accept(id)
	}
	return id, nil
}

func (t *generation) emit(s string) {
	t.text.WriteString(s)
	if t.o.OnToken != nil {
		t.o.OnToken(len(t.g.Tokens), s)
	}
}

// accept takes a sampled token. It reports whether the generation is over: an
// end-of-generation token or a stop string (FinishStop), or MaxTokens reached or fed, the
// tokens in the sequence, reaching its capacity (FinishLength). Otherwise id is to be fed.
func (t *generation) accept(id int32, fed, capacity int) bool {
	if t.o.Vocab != nil && t.o.Vocab.IsEOG(id) {
		if t.o.Logprobs { // Logprobs follows Tokens, which leave the end token out
			t.g.Logprobs = t.g.Logprobs[:len(t.g.Logprobs)-1]
		}
		t.g.FinishReason = FinishStop
		return true
	}
	t.g.Tokens = append(t.g.Tokens, id)
	t.g.CompletionTokens = len(t.g.Tokens)
	out, _ := t.stops.Push(t.o.Stream.Next(id))
	t.emit(out)
	if t.stops.Hit() || (t.o.Grammar != nil && t.o.Grammar.Done()) {
		t.g.FinishReason = FinishStop
		return true
	}
	if len(t.g.Tokens) >= t.o.MaxTokens || fed >= capacity {
		t.g.FinishReason = FinishLength
		return true
	}
	return false
}

// result ends the generation: the text held back for an incomplete character or a possible
// stop string is emitted (unless a stop string was found), and with cancelled set the
// finish reason says so.
func (t *generation) result(cancelled bool) Generation {
	if cancelled {
		t.g.FinishReason = FinishCancelled
	}
	if !t.stops.Hit() {
		out, _ := t.stops.Push(t.o.Stream.Flush())
		t.emit(out + t.stops.Flush())
	}
	t.g.Text = t.text.String()
	return t.g
}

// Generate prefills prompt and decodes until an end-of-generation token, a stop string,
// MaxTokens or a full context. When ctx ends it returns what was generated so far with
// FinishCancelled and ctx's error; other errors are engine faults.
func (s *Session) Generate(ctx context.Context, prompt []int32, o GenerateOptions) (Generation, error) {
	gs, err := s.GenerateN(ctx, prompt, []GenerateOptions{o})
	return gs[0], err
}

// GenerateN generates len(os) completions of one prompt, each with its own options (its
// own sampler, grammar matcher and text stream): the prompt is prefilled once (with os[0]'s
// chunk and progress), the state after it kept, and each completion decoded from there in
// turn, the state restored between them. It returns one Generation per option, and the
// first error; a completion that did not run because an earlier one failed or ctx ended is
// FinishCancelled. Each Generation has the prompt's tokens and prefill time; the caller
// counts them once.
func (s *Session) GenerateN(ctx context.Context, prompt []int32, os []GenerateOptions) ([]Generation, error) {
	ts, err := newGenerations(os, len(prompt))
	if err != nil {
		return generationsOf(ts), err
	}
	o := os[0]
	start, pos := time.Now(), s.Pos()
	var cached Generation // CachedTokens, from the prefix store
	logits, err := s.prefillCached(ctx, prompt, PrefillOptions{Chunk: o.Chunk, CancelEvery: o.CancelEvery, Progress: o.OnPrefill}, &cached)
	for _, t := range ts {
		t.g.Prefill = time.Since(start)
		t.g.CachedTokens = cached.CachedTokens
		if err != nil {
			// PromptTokens counts what was prefilled, not what was asked for.
			t.g.PromptTokens = s.Pos() - pos
		}
	}
	if err != nil {
		return failAll(ctx, ts, err)
	}
	var snap []byte
	prefilled := s.pos
	if len(ts) > 1 {
		// The next pass may reuse the logits' memory; the state is saved once, restored for
		// each completion after the first.
		logits = slices.Clone(logits)
		if snap, err = s.state.Snapshot(s.m.Backend, prefilled); err != nil {
			return failAll(ctx, ts, fmt.Errorf("engine: keep the state after the prompt: %w", err))
		}
	}
	for i, t := range ts {
		if i > 0 {
			if err := s.state.Restore(s.m.Backend, prefilled, snap); err != nil {
				s.broken = err
				return failAll(ctx, ts[i:], fmt.Errorf("engine: restore the state after the prompt: %w", err))
			}
			s.pos, s.drafted = prefilled, false
		}
		if err := s.decode(ctx, t, logits); err != nil {
			gs := generationsOf(ts)
			if len(ts) > i+1 {
				failAll(ctx, ts[i+1:], err)
				gs = generationsOf(ts)
			}
			return gs, err
		}
	}
	return generationsOf(ts), nil
}

func newGenerations(os []GenerateOptions, promptTokens int) ([]*generation, error) {
	if len(os) == 0 {
		return []*generation{{}}, errors.New("engine: generate of no completions")
	}
	ts := make([]*generation, len(os))
	var first error
	for i, o := range os {
		t, err := newGeneration(o, promptTokens)
		ts[i] = t
		if err != nil && first == nil {
			first = err
		}
	}
	return ts, first
}

func generationsOf(ts []*generation) []Generation {
	gs := make([]Generation, len(ts))
	for i, t := range ts {
		gs[i] = t.g
	}
	return gs
}

// failAll ends generations that stopped with err: with ctx's end as cancelled, with what
// they generated so far.
func failAll(ctx context.Context, ts []*generation, err error) ([]Generation, error) {
	for _, t := range ts {
		t.fail(ctx, err)
	}
	return generationsOf(ts), err
}

func (t *generation) fail(ctx context.Context, err error) {
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		t.result(true)
		return
	}
	t.g.Text = t.text.String()
}

// decode samples t's tokens from logits, the session's after the prompt, until t is over.
func (s *Session) decode(ctx context.Context, t *generation, logits []float32) error {
	o := t.o
	// With the session's MTP head and greedy sampling a step may feed two tokens: the chosen
	// one and the head's draft of the next, kept when the model agrees — the draft then is
	// the next greedy choice, and ahead holds the logits after it, already in the session.
	drafter, _ := s.m.Graph.(model.Drafter)
	// A draft is checked against the model's own greedy choice, so nothing may change the
	// logits: no grammar, no penalties.
	speculative := s.mtp && drafter != nil && o.Grammar == nil &&
		(o.Sampler == nil || o.Sampler.Params().Greedy() && !o.Sampler.Params().Penalized())
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
				t.g.Speculation.Drafted++
				t.g.Speculation.Passes++
			}
			if ok {
				t.g.Speculation.Accepted++
				vocab := len(rows) / 2
				ahead = rows[vocab:]
				return rows[:vocab], nil
			}
			t.g.Speculation.Passes++
			if rows != nil {
				return rows, nil // rejected: id was fed again alone
			}
		}
		return s.Decode(ctx, id)
	}

	start := time.Now()
	for {
		id, err := t.pick(logits)
		if err != nil {
			t.g.Text = t.text.String()
			return err
		}
		fed := s.pos // tokens in the session, not counting an accepted draft not yet chosen
		if ahead != nil {
			fed--
		}
		if t.accept(id, fed, s.Capacity()) {
			break
		}
		if logits, err = advance(id); err != nil {
			t.g.Decode = time.Since(start)
			t.fail(ctx, err)
			return err
		}
	}
	t.g.Decode = time.Since(start)
	t.result(false)
	return nil
}
