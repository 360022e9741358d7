// Package engine loads GGUF models and runs them: a Model binds an architecture's weights on
// a backend (the CPU by default) and opens Sessions, each owning one sequence's KV cache and
// position, which prefill prompts in chunks and decode token by token.
package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/tokenizer"
	"github.com/redlite/batch/grammar"

	_ "github.com/redlite/batch/engine/models/qwen3"     // registers "qwen3", "qwen3moe", "llama"
	_ "github.com/redlite/batch/engine/models/qwen3next" // registers "qwen3next"
)

// Options configure Load.
type Options struct {
	// Backend runs the model; nil means the CPU backend with Threads threads.
	Backend ml.Backend
	// Threads for the CPU backend; 0 means GOMAXPROCS.
	Threads int
	// ExpertCacheMiB bounds the routed experts held in memory to a cache of this many
	// MiB filled from the mapped file; 0 keeps every expert resident. It needs a backend
	// that implements ml.ExpertResidency.
	ExpertCacheMiB int
	// CPUDot is the CPU backend's dot path for quantized products: "auto" (8-bit
	// activations for the types where they are faster; also what empty means), "exact" or
	// "int8" (see cpu.Dot). Other backends ignore it.
	CPUDot string
}

// Model is a loaded GGUF model.
type Model struct {
	File     *gguf.File
	Graph    model.Graph
	Backend  ml.Backend
	LoadTime time.Duration

	tokOnce sync.Once
	tok     *tokenizer.Tokenizer
	tokErr  error

	vocabOnce sync.Once
	vocab     *grammar.Vocab
}

// Load maps the GGUF at path and binds its architecture's weights.
func Load(path string, opts Options) (*Model, error) {
	start := time.Now()
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	b := opts.Backend
	if b == nil {
		b = cpu.New(opts.Threads)
	}
	if d, ok := b.(interface{ SetDot(cpu.Dot) }); ok {
		dot, err := cpu.ParseDot(opts.CPUDot)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("load %s: CPU dot path: %w", path, err)
		}
		d.SetDot(dot)
	}
	if opts.ExpertCacheMiB != 0 {
		er, ok := b.(ml.ExpertResidency)
		if !ok {
			f.Close()
			return nil, fmt.Errorf("load %s: backend %s has no expert cache (ExpertCacheMiB %d)", path, b.Name(), opts.ExpertCacheMiB)
		}
		if err := er.SetExpertCache(int64(opts.ExpertCacheMiB) << 20); err != nil {
			f.Close()
			return nil, fmt.Errorf("load %s: %w", path, err)
		}
	}
	g, err := model.Build(f, b)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return &Model{File: f, Graph: g, Backend: b, LoadTime: time.Since(start)}, nil
}

// Close unmaps the file; sessions must not be used afterwards.
func (m *Model) Close() error { return m.File.Close() }

// HostWeightBytes is the heap the backend holds for the model's weights beside the mapped
// file (the CPU backend's repacked rows); 0 for a backend that holds none.
func (m *Model) HostWeightBytes() int64 {
	if b, ok := m.Backend.(interface{ HostWeightBytes() int64 }); ok {
		return b.HostWeightBytes()
	}
	return 0
}

// MappedWeightBytes is the part of HostWeightBytes the backend holds outside the Go heap
// (the CPU backend's large repacked layouts, in mappings of their own), which the Go
// memory limit does not count.
func (m *Model) MappedWeightBytes() int64 {
	if b, ok := m.Backend.(interface{ MappedWeightBytes() int64 }); ok {
		return b.MappedWeightBytes()
	}
	return 0
}

// Tokenizer builds (once) the tokenizer from the file's tokenizer.ggml.* metadata.
func (m *Model) Tokenizer() (*tokenizer.Tokenizer, error) {
	m.tokOnce.Do(func() {
		m.tok, m.tokErr = tokenizer.FromGGUF(m.File)
		if m.tokErr == nil && m.tok.VocabSize() < m.Config().Vocab {
			m.tokErr = fmt.Errorf("engine: the tokenizer has %d tokens but the model has %d rows", m.tok.VocabSize(), m.Config().Vocab)
		}
	})
	return m.tok, m.tokErr
}

// GrammarVocab builds (once) the vocabulary a grammar.Matcher masks: each token's bytes as
// the tokenizer decodes them (control tokens and rows past the tokenizer have none, so no
// grammar produces them) and the end-of-generation tokens.
func (m *Model) GrammarVocab() (*grammar.Vocab, error) {
	tok, err := m.Tokenizer()
	if err != nil {
		return nil, err
	}
	m.vocabOnce.Do(func() {
		n := tok.VocabSize()
		m.vocab = grammar.NewVocab(m.Config().Vocab, func(id int32) string {
			if int(id) >= n {
				return ""
			}
			return tok.Decode([]int32{id})
		}, tok.EOG())
	})
	return m.vocab, nil
}

// Config returns the model's shape.
func (m *Model) Config() model.Config { return m.Graph.Config() }

// SessionOptions configure a session.
type SessionOptions struct {
	// Context is the number of positions the session can hold (prompt and output);
	// 0 means the model's trained context.
	Context int
	// KV is the KV cache precision.
	KV ml.DType
	// MTP enables self-speculative decoding with the model's next-token-prediction head
	// (DecodeGreedy); the model must have one.
	MTP bool
	// Prefixes, when set, is the prefix cache a Generate from an empty session starts from
	// and adds its prompt's longest whole-block prefix to (PrefixStore).
	Prefixes *PrefixStore
}

// ErrContextFull is returned when a session has no room for more tokens.
var ErrContextFull = errors.New("engine: context is full")

// ErrBadToken is returned for token ids outside the vocabulary.
var ErrBadToken = errors.New("engine: token id outside the vocabulary")

// ErrSessionClosed is returned by a closed session.
var ErrSessionClosed = errors.New("engine: session is closed")

// Session is one sequence: its state and position.
type Session struct {
	m      *Model
	state  model.State
	pos    int
	kvType ml.DType
	mtp    bool
	// prefixes is SessionOptions.Prefixes.
	prefixes *PrefixStore
	// drafted reports whether the last speculate call ran a verification pass.
	drafted bool
	// broken is the error of a failed pass: the state may hold part of it, so the session
	// refuses to go on.
	broken error
}

// Close releases the session's state (KV cache, recurrent state) at once. A closed session
// refuses further work; Close is idempotent. Every session must be closed.
func (s *Session) Close() {
	if s.broken == ErrSessionClosed {
		return
	}
	s.state.Free()
	s.broken = ErrSessionClosed
}

// NewSession allocates a session's state.
func (m *Model) NewSession(o SessionOptions) (*Session, error) {
	n := o.Context
	if n == 0 {
		n = m.Config().ContextLength
	}
	if n <= 0 {
		return nil, fmt.Errorf("engine: session context must be positive, got %d", n)
	}
	st, err := m.Graph.NewState(m.Backend, n, o.KV)
	if err != nil {
		return nil, err
	}
	if o.MTP {
		d, ok := m.Graph.(model.Drafter)
		if !ok {
			return nil, fmt.Errorf("engine: %s models have no MTP head", m.Config().Arch)
		}
		if err := d.EnableDraft(m.Backend, st); err != nil {
			return nil, err
		}
	}
	return &Session{m: m, state: st, kvType: o.KV, mtp: o.MTP, prefixes: o.Prefixes}, nil
}

// Pos is the number of tokens the session holds.
func (s *Session) Pos() int { return s.pos }

// Capacity is the number of positions the session can hold.
func (s *Session) Capacity() int { return s.state.Capacity() }

// StateBytes is the memory the session's state holds.
func (s *Session) StateBytes() int64 { return s.state.Bytes() }

// PrefillOptions tune Prefill.
type PrefillOptions struct {
	// Chunk is the number of tokens per forward pass; 0 means all at once.
	Chunk int
	// AllLogits returns logits for every token instead of only the last.
	AllLogits bool
	// CancelEvery, when positive and below Chunk, splits each chunk into forward passes of
	// at most this many tokens, so that a cancelled ctx stops the prefill within one such
	// pass whatever the chunk (the result is the same; only the pass size differs).
	CancelEvery int
	// Progress, when set, is called after each forward pass with the tokens done so far.
	Progress func(done, total int)
}

// Prefill runs tokens through the model in chunks and returns the logits of the last token
// ([vocab]) or, with AllLogits, of every token ([len(tokens)·vocab], row-major). A cancelled
// ctx stops it between chunks (or CancelEvery passes); the tokens already processed stay in
// the session (Pos counts them).
func (s *Session) Prefill(ctx context.Context, tokens []int32, o PrefillOptions) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, errors.New("engine: prefill of no tokens")
	}
	if err := s.check(tokens); err != nil {
		return nil, err
	}
	chunk := o.Chunk
	if chunk <= 0 {
		chunk = len(tokens)
	}
	if o.CancelEvery > 0 && o.CancelEvery < chunk {
		chunk = o.CancelEvery
	}
	vocab := s.m.Config().Vocab
	var all []float32
	if o.AllLogits {
		all = make([]float32, 0, len(tokens)*vocab)
	}
	var last []float32
	for done := 0; done < len(tokens); {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("engine: prefill stopped after %d of %d tokens: %w", done, len(tokens), err)
		}
		n := min(chunk, len(tokens)-done)
		var err error
		if last, err = s.forward(tokens[done:done+n], o.AllLogits); err != nil {
			return nil, err
		}
		if o.AllLogits {
			all = append(all, last...)
		}
		done += n
		if o.Progress != nil {
			o.Progress(done, len(tokens))
		}
	}
	if o.AllLogits {
		return all, nil
	}
	return last, nil
}

// Decode runs one token and returns the logits of the next.
func (s *Session) Decode(ctx context.Context, token int32) ([]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("engine: decode stopped: %w", err)
	}
	tokens := []int32{token}
	if err := s.check(tokens); err != nil {
		return nil, err
	}
	return s.forward(tokens, false)
}

func (s *Session) check(tokens []int32) error {
	if s.broken != nil {
		return s.broken
	}
	if s.pos+len(tokens) > s.state.Capacity() {
		return fmt.Errorf("%w: %d tokens at position %d exceed the session's %d positions", ErrContextFull, len(tokens), s.pos, s.state.Capacity())
	}
	vocab := s.m.Config().Vocab
	for i, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("%w: token %d at index %d (vocabulary has %d)", ErrBadToken, t, i, vocab)
		}
	}
	return nil
}

func (s *Session) forward(tokens []int32, all bool) ([]float32, error) {
	out, err := s.pass(func(ctx ml.Context) ml.Tensor {
		return s.m.Graph.Forward(ctx, model.Single(s.state, tokens, s.pos, all))
	})
	if err != nil {
		return nil, err
	}
	s.pos += len(tokens)
	return out, nil
}

// pass issues one forward pass with build, runs it and reads the tensor build returns (none
// when it returns nil). A pass that fails breaks the session, whose state may then hold part
// of the pass.
func (s *Session) pass(build func(ml.Context) ml.Tensor) ([]float32, error) {
	outs, err := s.passReading(func(ctx ml.Context) []ml.Tensor { return []ml.Tensor{build(ctx)} })
	if err != nil {
		return nil, err
	}
	return outs[0], nil
}

// passReading is pass for a build that returns several tensors to read (nil ones read as nil).
func (s *Session) passReading(build func(ml.Context) []ml.Tensor) ([][]float32, error) {
	if s.broken != nil {
		return nil, s.broken
	}
	outs, err := runPasses(s.m.Backend, build)
	if err != nil {
		s.broken = err
	}
	return outs, err
}

// runPass issues one forward pass on b with build, runs it and reads the tensor build
// returns (none when it returns nil). An operation's error and a panic while the graph is
// issued (a shape that does not fit) both fail the pass.
func runPass(b ml.Backend, build func(ml.Context) ml.Tensor) ([]float32, error) {
	outs, err := runPasses(b, func(ctx ml.Context) []ml.Tensor { return []ml.Tensor{build(ctx)} })
	if err != nil {
		return nil, err
	}
	return outs[0], nil
}

// runPasses is runPass reading every tensor build returns.
func runPasses(b ml.Backend, build func(ml.Context) []ml.Tensor) (out [][]float32, err error) {
	ctx := b.NewContext()
	defer ctx.Close()
	defer func() {
		if p := recover(); p != nil {
			if e, ok := p.(error); ok {
				err = fmt.Errorf("engine: forward pass: %w", e)
			} else {
				err = fmt.Errorf("engine: forward pass: %v", p)
			}
		}
	}()
	ts := build(ctx)
	if err := ctx.Compute(); err != nil {
		return nil, fmt.Errorf("engine: forward pass: %w", err)
	}
	out = make([][]float32, len(ts))
	for i, t := range ts {
		if t == nil {
			continue
		}
		if out[i], err = ctx.Read(t); err != nil {
			return nil, err
		}
	}
	return out, nil
}
