package engine

import (
	"context"
	"fmt"

	"github.com/redlite/batch/engine/model"
)

// SpecStats counts the drafts of a self-speculative decode.
type SpecStats struct {
	Drafted  int // two-token verification steps run
	Accepted int // drafts the model agreed with
	Passes   int // forward passes of the main model, verification steps included
}

// DecodeGreedy continues the session greedily from logits (the result of the last Prefill
// or Decode) and returns the next n tokens: each is the argmax of the model's logits after
// the ones before it (ties to the lower id). The session consumes every returned token but
// the last, as n−1 Decode calls would, so the caller can go on with Decode(last).
//
// With the session's MTP option the model's next-token-prediction head drafts the token
// after next; one two-token pass then verifies it and, when the model agrees, yields two
// tokens for one pass. A rejected draft rolls the recurrent state back and redoes the step
// as a single token. Both paths compute exactly what plain decoding computes (the
// verification pass evaluates each token as a decode step would), so the tokens are
// identical to MTP off.
func (s *Session) DecodeGreedy(ctx context.Context, logits []float32, n int) ([]int32, SpecStats, error) {
	var st SpecStats
	vocab := s.m.Config().Vocab
	if len(logits) != vocab {
		return nil, st, fmt.Errorf("engine: greedy decode from %d logits (vocabulary has %d)", len(logits), vocab)
	}
	drafter, _ := s.m.Graph.(model.Drafter)
	out := make([]int32, 0, n)
	next := int32(argmaxLogits(logits))
	for n > 0 {
		out = append(out, next)
		if len(out) == n {
			break
		}
		if err := ctx.Err(); err != nil {
			return out, st, fmt.Errorf("engine: decode stopped after %d tokens: %w", len(out), err)
		}
		// Draft only where an accepted draft still leaves a token to return, so the
		// session ends where plain decoding would.
		if s.mtp && drafter != nil && len(out) <= n-2 {
			if rows, ok := s.speculate(drafter, next); ok {
				st.Drafted++
				st.Accepted++
				st.Passes++
				out = append(out, int32(argmaxLogits(rows[:vocab])))
				next = int32(argmaxLogits(rows[vocab:]))
				continue
			} else if s.drafted {
				st.Drafted++
				st.Passes++
			}
		}
		if err := s.check([]int32{next}); err != nil {
			return out, st, err
		}
		st.Passes++
		next = int32(argmaxLogits(s.forward([]int32{next}, false)))
	}
	return out, st, nil
}

// speculate feeds tok and the MTP head's draft of the token after it in one verification
// pass. When the model's own choice after tok is the draft, both stay in the session and it
// returns the two positions' logits ([2·vocab]); otherwise it undoes the pass and returns
// false, and the caller feeds tok alone. s.drafted says whether a verification pass ran.
func (s *Session) speculate(d model.Drafter, tok int32) ([]float32, bool) {
	s.drafted = false
	if s.check([]int32{tok, 0}) != nil {
		return nil, false
	}
	draft := s.draft(d, tok)
	if s.check([]int32{tok, draft}) != nil {
		return nil, false
	}
	s.drafted = true
	vocab := s.m.Config().Vocab
	rows := s.verify(d, tok, draft)
	if int32(argmaxLogits(rows[:vocab])) == draft {
		return rows, true
	}
	s.rollback(d, 2)
	return nil, false
}

// draft asks the MTP head for the token after tok, which is about to be fed at s.pos.
func (s *Session) draft(d model.Drafter, tok int32) int32 {
	ctx := s.m.Backend.NewContext()
	defer ctx.Close()
	out := d.Draft(ctx, s.state, tok, s.pos)
	ctx.Compute()
	return int32(argmaxLogits(ctx.Read(out)))
}

// verify checkpoints the recurrent state and feeds tok and draft in one pass, returning
// both positions' logits.
func (s *Session) verify(d model.Drafter, tok, draft int32) []float32 {
	ctx := s.m.Backend.NewContext()
	d.Checkpoint(ctx, s.state)
	ctx.Compute()
	ctx.Close()
	return s.forward([]int32{tok, draft}, true)
}

// rollback undoes the last verification pass of n tokens.
func (s *Session) rollback(d model.Drafter, n int) {
	ctx := s.m.Backend.NewContext()
	defer ctx.Close()
	d.Rollback(ctx, s.state)
	ctx.Compute()
	s.pos -= n
}

func argmaxLogits(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
