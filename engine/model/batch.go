package model

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
)

// Batch is the tokens of one forward pass, as llama.cpp's llama_batch: each token with its
// sequence, its position and whether its logits are wanted. The tokens of one sequence are
// adjacent and at consecutive positions (a run); runs of different sequences follow each
// other in any order. Everything that works per token (projections, norms, experts) runs
// over the whole batch at once, so a step that advances many sequences reads the weights
// once; attention and the recurrent layers work per run on the run's own state.
type Batch struct {
	Tokens []int32
	Seq    []int  // per token: its sequence, an index into States
	Pos    []int  // per token: its position in the sequence
	Logits []bool // per token: whether Forward returns its logits
	States []State
}

// Run is a batch's tokens of one sequence: tokens [Start, Start+N) at positions Pos0 ….
type Run struct {
	State          State
	Seq            int
	Start, N, Pos0 int
}

// Single is the batch of one sequence's tokens at positions pos0 …, with the logits of the
// last token or, with all, of every token.
func Single(s State, tokens []int32, pos0 int, all bool) Batch {
	b := Batch{Tokens: tokens, Seq: make([]int, len(tokens)), Pos: make([]int, len(tokens)), Logits: make([]bool, len(tokens)), States: []State{s}}
	for i := range tokens {
		b.Pos[i] = pos0 + i
		b.Logits[i] = all
	}
	if len(tokens) > 0 {
		b.Logits[len(tokens)-1] = true
	}
	return b
}

// Add appends a run of tokens of state s at positions pos0 …, with the logits of the last
// one when last is set, and returns the batch.
func (b Batch) Add(s State, tokens []int32, pos0 int, last bool) Batch {
	seq := len(b.States)
	b.States = append(b.States, s)
	for i, t := range tokens {
		b.Tokens = append(b.Tokens, t)
		b.Seq = append(b.Seq, seq)
		b.Pos = append(b.Pos, pos0+i)
		b.Logits = append(b.Logits, last && i == len(tokens)-1)
	}
	return b
}

// Runs checks the batch and splits it into runs: every per-token slice as long as Tokens, a
// known sequence per token, each sequence's tokens in one run of consecutive positions
// within its state's capacity.
func (b Batch) Runs() ([]Run, error) {
	n := len(b.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("model: a batch of no tokens")
	}
	if len(b.Seq) != n || len(b.Pos) != n || len(b.Logits) != n {
		return nil, fmt.Errorf("model: a batch of %d tokens with %d sequence ids, %d positions and %d logit flags", n, len(b.Seq), len(b.Pos), len(b.Logits))
	}
	var runs []Run
	seen := make([]bool, len(b.States))
	for i := 0; i < n; {
		s := b.Seq[i]
		if s < 0 || s >= len(b.States) || b.States[s] == nil {
			return nil, fmt.Errorf("model: token %d names sequence %d of %d", i, s, len(b.States))
		}
		if seen[s] {
			return nil, fmt.Errorf("model: sequence %d has tokens in two places of the batch (token %d)", s, i)
		}
		seen[s] = true
		r := Run{State: b.States[s], Seq: s, Start: i, Pos0: b.Pos[i]}
		for i < n && b.Seq[i] == s {
			if b.Pos[i] != r.Pos0+(i-r.Start) {
				return nil, fmt.Errorf("model: token %d of sequence %d is at position %d, want %d (positions of a run are consecutive)", i, s, b.Pos[i], r.Pos0+(i-r.Start))
			}
			i++
		}
		r.N = i - r.Start
		if r.Pos0 < 0 || r.Pos0+r.N > r.State.Capacity() {
			return nil, fmt.Errorf("model: sequence %d: positions [%d, %d) outside its %d", s, r.Pos0, r.Pos0+r.N, r.State.Capacity())
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// MustRuns is Runs for the graphs, which panic on misuse as backend operations do (the
// engine checks a batch before it issues a pass).
func (b Batch) MustRuns() []Run {
	runs, err := b.Runs()
	if err != nil {
		panic(err)
	}
	return runs
}

// LogitRows lists the tokens whose logits are wanted, in batch order.
func (b Batch) LogitRows() []int {
	var rows []int
	for i, want := range b.Logits {
		if want {
			rows = append(rows, i)
		}
	}
	return rows
}

// RunRows is run j's rows of x (its first dimension): x itself when the batch is that one
// run, so a lone sequence issues the same operations as before batching.
func RunRows(ctx ml.Context, runs []Run, j int, x ml.Tensor) ml.Tensor {
	r := runs[j]
	if len(runs) == 1 && r.Start == 0 && r.N == x.Shape()[0] {
		return x
	}
	return ctx.Rows(x, r.Start, r.N)
}

// RunStates is every run's sequence state as the architecture's own type S: the one place a
// graph asserts its state type, so a mismatch names both types instead of a bare panic.
func RunStates[S State](runs []Run) []S {
	out := make([]S, len(runs))
	for j, r := range runs {
		s, ok := r.State.(S)
		if !ok {
			panic(fmt.Sprintf("model: run %d holds a %T, not the %T this graph made", j, r.State, s))
		}
		out[j] = s
	}
	return out
}

// PerRun computes a batch's rows run by run — what depends on a sequence's own state (its
// KV cache, its recurrent state) — and joins them in batch order.
func PerRun(ctx ml.Context, runs []Run, f func(j int, r Run) ml.Tensor) ml.Tensor {
	parts := make([]ml.Tensor, len(runs))
	for j, r := range runs {
		parts[j] = f(j, r)
	}
	return ConcatRows(ctx, parts...)
}

// Attend is every run's causal attention of its queries qs[j] [N, heads, headDim] over its
// own cache caches[j] at its positions, joined in batch order: [n, heads·headDim]. A context
// that attends a batch in one operation (ml.BatchAttention) gets every run at once; other
// contexts, and a lone run, attend run by run.
func Attend(ctx ml.Context, runs []Run, qs []ml.Tensor, caches []ml.Cache, layer int, scale float32) ml.Tensor {
	if ba, ok := ctx.(ml.BatchAttention); ok && len(runs) > 1 {
		pos0s := make([]int, len(runs))
		for j, r := range runs {
			pos0s[j] = r.Pos0
		}
		return ba.AttentionRuns(qs, caches, layer, pos0s, scale)
	}
	return PerRun(ctx, runs, func(j int, r Run) ml.Tensor {
		return ctx.Attention(qs[j], caches[j], layer, r.Pos0, scale)
	})
}

// ConcatRows joins tensors along their first dimension (the others must agree).
func ConcatRows(ctx ml.Context, ts ...ml.Tensor) ml.Tensor {
	if len(ts) == 1 {
		return ts[0]
	}
	shape := append([]int(nil), ts[0].Shape()...)
	flat := make([]ml.Tensor, len(ts))
	rows := 0
	for i, t := range ts {
		sh := t.Shape()
		rows += sh[0]
		flat[i] = ctx.Reshape(t, 1, ml.Numel(sh))
	}
	shape[0] = rows
	return ctx.Reshape(ctx.Concat(flat...), shape...)
}

// GatherRows selects rows of x's first dimension, in order: a view when they are
// consecutive.
func GatherRows(ctx ml.Context, x ml.Tensor, rows []int) ml.Tensor {
	var parts []ml.Tensor
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j] == rows[j-1]+1 {
			j++
		}
		parts = append(parts, ctx.Rows(x, rows[i], j-i))
		i = j
	}
	if len(parts) == 1 && rows[0] == 0 && len(rows) == x.Shape()[0] {
		return x
	}
	return ConcatRows(ctx, parts...)
}
