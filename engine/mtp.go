package engine

import (
	"context"
	"fmt"

	"github.com/redlite/batch/engine/ml"
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
			rows, ok, err := s.speculate(drafter, next)
			if err != nil {
				return out, st, err
			}
			if s.drafted {
				st.Drafted++
				st.Passes++
			}
			if ok {
				st.Accepted++
				out = append(out, int32(argmaxLogits(rows[:vocab])))
				next = int32(argmaxLogits(rows[vocab:]))
				continue
			}
			if rows != nil {
				// Rejected: next was fed again alone; rows are its logits.
				st.Passes++
				next = int32(argmaxLogits(rows))
				continue
			}
		}
		if err := s.check([]int32{next}); err != nil {
			return out, st, err
		}
		st.Passes++
		l, err := s.forward([]int32{next}, false)
		if err != nil {
			return out, st, err
		}
		next = int32(argmaxLogits(l))
	}
	return out, st, nil
}

// speculate feeds tok and the MTP head's draft of the token after it in one verification
// pass. When the model's own choice after tok is the draft, both stay in the session and it
// returns the two positions' logits ([2·vocab]) and true. Otherwise it undoes the
// verification and feeds tok alone, in one pass, and returns tok's logits ([vocab]) and
// false. With nil logits and false nothing was fed (no room for two tokens): the caller
// feeds tok. s.drafted says whether a verification pass ran.
//
// The checkpoint, the draft and its verification are one pass: the draft's id goes from
// the head's argmax to the verification's embedding on the backend, and only the id (to
// check) and the logits come back. So an accepted draft takes one pass for two tokens, and
// a rejected one two passes (the second undoes the verification and redoes tok): each
// pass is a command buffer and a wait on a GPU.
func (s *Session) speculate(d model.Drafter, tok int32) ([]float32, bool, error) {
	s.drafted = false
	if s.check([]int32{tok, 0}) != nil {
		return nil, false, s.broken
	}
	pos := s.pos
	outs, err := s.passReading(func(ctx ml.Context) []ml.Tensor {
		d.Checkpoint(ctx, s.state)
		logits := d.Draft(ctx, s.state, tok, pos)
		// The id the verification embeds is consumed by it; a second argmax is read.
		return []ml.Tensor{ctx.Argmax(logits), d.Verify(ctx, s.state, tok, ctx.Argmax(logits), pos)}
	})
	if err != nil {
		return nil, false, err
	}
	s.drafted = true
	s.pos += 2
	draft, rows := int32(outs[0][0]), outs[1]
	if int32(argmaxLogits(rows[:s.m.Config().Vocab])) == draft {
		return rows, true, nil
	}
	rows, err = s.redo(d, tok)
	return rows, false, err
}

// redo undoes the verification pass of tok and its draft and feeds tok alone, in one pass:
// the rollback restores the state the single token's forward pass then reads.
func (s *Session) redo(d model.Drafter, tok int32) ([]float32, error) {
	s.pos -= 2
	out, err := s.pass(func(ctx ml.Context) ml.Tensor {
		d.Rollback(ctx, s.state)
		return s.m.Graph.Forward(ctx, model.Single(s.state, []int32{tok}, s.pos, false))
	})
	if err != nil {
		return nil, err
	}
	s.pos++
	return out, nil
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
