package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

// Continuous batching. A Scheduler owns one KV pool and runs every active sequence in the
// same forward passes: each step advances every decoding sequence by one token and fills the
// rest of a token budget with prefill chunks of the sequences still reading their prompts
// (chunked prefill mixed with decode, as vLLM does). Decode reads all dense weights once per
// step whatever the batch, so a step of many sequences costs little more than a step of one.
// Sampling, stop strings, streamed text and cancellation stay per sequence; a sequence that
// ends gives its KV blocks back at once, and the next waiting one is admitted.

// SchedulerOptions size a Scheduler.
type SchedulerOptions struct {
	// KV is the pool's precision: every sequence's cache has it.
	KV ml.DType
	// Slots is the number of sequences run at once.
	Slots int
	// Blocks and BlockSize size the KV pool: Blocks blocks of BlockSize positions (0:
	// DefaultBlockSize). A sequence is admitted when a slot is free and the pool has the
	// blocks for its whole capacity (prompt + max tokens), so it never waits for memory
	// mid-generation.
	Blocks, BlockSize int
	// StepTokens is the token budget of one step (0: DefaultStepTokens): decode tokens
	// first, then prefill chunks.
	StepTokens int
	// MaxWait bounds how long a sequence waits for a slot and its blocks; past it Generate
	// fails with ErrAdmissionTimeout (0: no bound but its context).
	MaxWait time.Duration
	// OnStep, when set, is called after every step from the scheduler's goroutine.
	OnStep func(StepStats)
	// Prefix, when set, turns the prefix cache on (prefix.go): prompts that start with
	// whole blocks another sequence read start from its state and prefill only the rest.
	Prefix *PrefixCacheOptions
}

// Defaults of SchedulerOptions.
const (
	DefaultBlockSize  = 256
	DefaultStepTokens = 512
)

// StepStats describe one step.
type StepStats struct {
	Sequences  int // sequences in the step's batch
	Decoding   int // of them, decoding one token
	Tokens     int // tokens in the batch
	Duration   time.Duration
	FreeBlocks int // the pool's free blocks after the step
}

// ErrSchedulerClosed is returned for sequences that a closed scheduler did not finish.
var ErrSchedulerClosed = errors.New("engine: the scheduler is closed")

// ErrAdmissionTimeout is wrapped when a sequence waited SchedulerOptions.MaxWait without
// being admitted: the worker is busy with others; it never ran.
var ErrAdmissionTimeout = errors.New("engine: no slot and KV blocks became free in time")

// ErrTooLarge is wrapped when a sequence needs more KV blocks than the whole pool holds.
var ErrTooLarge = errors.New("engine: the sequence needs more KV blocks than the pool holds")

// Scheduler runs many sequences' generations together. Its methods are safe for concurrent
// use.
type Scheduler struct {
	m      *Model
	o      SchedulerOptions
	pool   ml.KVPool
	prefix *prefixCache // nil without a prefix cache

	mu      sync.Mutex
	waiting []*sequence // in arrival order
	active  []*sequence
	closed  bool
	paused  bool
	wake    chan struct{}
	done    chan struct{}
}

// sequence is one Generate call inside the scheduler.
type sequence struct {
	ctx      context.Context
	prompt   []int32
	capacity int
	o        GenerateOptions
	t        *generation
	arrived  time.Time

	state    model.State
	admitted time.Time
	started  time.Time // decode start
	pos      int       // tokens in the state
	next     int32     // the token to feed when decoding
	decoding bool

	// forks are the other completions of a GenerateN, which start from this sequence's
	// state once its prompt is read; nil once forked (or for a fork itself).
	forks []*sequence
	// snap is a fork's state to start from until it is admitted, and first the logits
	// after the prompt it samples its first token from.
	snap  []byte
	first []float32

	// The prefix cache's view: the hashes of the prompt's whole blocks, how many of them
	// the cache has from this sequence (or had before it), and the last it added.
	hashes   []PrefixHash
	cachedTo int
	lastAdd  *PrefixHash

	finished chan struct{}
	answered bool // finished is closed
	err      error
}

// NewScheduler allocates the KV pool and starts the scheduler's goroutine. Close stops it.
func (m *Model) NewScheduler(o SchedulerOptions) (*Scheduler, error) {
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.StepTokens == 0 {
		o.StepTokens = DefaultStepTokens
	}
	if o.Slots < 1 || o.Blocks < 1 || o.BlockSize < 1 || o.StepTokens < o.Slots {
		return nil, fmt.Errorf("engine: a scheduler of %d slots, %d blocks of %d positions and steps of %d tokens", o.Slots, o.Blocks, o.BlockSize, o.StepTokens)
	}
	pool, err := m.Graph.NewKVPool(m.Backend, o.Blocks, o.BlockSize, o.KV)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{m: m, o: o, pool: pool, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if o.Prefix != nil {
		if s.prefix, err = newPrefixCache(m, o.KV, o.BlockSize, *o.Prefix); err != nil {
			pool.Free()
			return nil, err
		}
	}
	go s.loop()
	return s, nil
}

// Options returns the scheduler's sizes, defaults filled in.
func (s *Scheduler) Options() SchedulerOptions { return s.o }

// FreeBlocks is the number of KV blocks no sequence holds.
func (s *Scheduler) FreeBlocks() int { return s.pool.FreeBlocks() }

// Waiting is the number of sequences waiting for a slot or KV blocks.
func (s *Scheduler) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// Pause stops admitting sequences (those running go on) until Resume: a benchmark or a
// test lines several up to start in the same step.
func (s *Scheduler) Pause() {
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
}

// Resume admits again.
func (s *Scheduler) Resume() {
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	s.signal()
}

// Close fails the waiting and active sequences with ErrSchedulerClosed, stops the goroutine
// and frees the pool.
func (s *Scheduler) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.signal()
	<-s.done
	if s.prefix != nil {
		s.prefix.drain()
	}
	s.pool.Free()
}

// PrefixStats reports the prefix cache's counts (zero without one).
func (s *Scheduler) PrefixStats() PrefixStats {
	if s.prefix == nil {
		return PrefixStats{}
	}
	return s.prefix.Stats()
}

func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Generate runs prompt as one sequence of the batch, holding capacity positions (prompt and
// output; 0 means prompt + MaxTokens), and waits for it: the same contract as
// Session.Generate, with the chunk set by the scheduler's step budget (o.Chunk and
// o.CancelEvery are not used: a cancelled ctx stops the sequence within one step).
// Generation.Queued says how long it waited for a slot and KV blocks.
func (s *Scheduler) Generate(ctx context.Context, prompt []int32, capacity int, o GenerateOptions) (Generation, error) {
	gs, err := s.GenerateN(ctx, prompt, capacity, []GenerateOptions{o})
	return gs[0], err
}

// GenerateN generates len(os) completions of one prompt, each with its own options (its
// own sampler, grammar matcher and text stream) and capacity positions (0: prompt + its
// MaxTokens), and waits for all of them. The prompt is prefilled once, by the first
// sequence (with os[0]'s progress); its state is then copied into a sequence per other
// completion, which waits for a slot and blocks like any sequence and decodes in the same
// steps as the rest. It returns one Generation per option, and the first error.
func (s *Scheduler) GenerateN(ctx context.Context, prompt []int32, capacity int, os []GenerateOptions) ([]Generation, error) {
	ts, err := newGenerations(os, len(prompt))
	fail := func(err error) ([]Generation, error) { return generationsOf(ts), err }
	if err != nil {
		return fail(err)
	}
	if len(prompt) == 0 {
		return fail(errors.New("engine: prefill of no tokens"))
	}
	vocab := s.m.Config().Vocab
	for i, id := range prompt {
		if id < 0 || int(id) >= vocab {
			return fail(fmt.Errorf("%w: token %d at index %d (vocabulary has %d)", ErrBadToken, id, i, vocab))
		}
	}
	qs := make([]*sequence, len(os))
	for i, o := range os {
		c := capacity
		if c == 0 {
			c = len(prompt) + o.MaxTokens
		}
		if c < len(prompt) {
			return fail(fmt.Errorf("%w: a prompt of %d tokens in a sequence of %d positions", ErrContextFull, len(prompt), c))
		}
		if need := ml.BlocksFor(c, s.o.BlockSize); need > s.o.Blocks {
			return fail(fmt.Errorf("%w: %d positions need %d blocks of %d, the pool has %d", ErrTooLarge, c, need, s.o.BlockSize, s.o.Blocks))
		}
		qs[i] = &sequence{ctx: ctx, prompt: prompt, capacity: c, o: o, t: ts[i], finished: make(chan struct{})}
	}
	q := qs[0]
	q.forks, q.arrived = qs[1:], time.Now()
	if len(q.forks) == 0 {
		q.forks = nil
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fail(ErrSchedulerClosed)
	}
	s.waiting = append(s.waiting, q)
	s.mu.Unlock()
	s.signal()
	var first error
	for _, q := range qs {
		<-q.finished
		if q.err != nil && first == nil {
			first = q.err
		}
	}
	return generationsOf(ts), first
}

// GenerateTogether runs the prompts as sequences of capacity positions each, with the same
// options, admitted in the same step as far as slots and blocks allow (a benchmark's or a
// measurement's batch), and waits for all of them. It returns the first error.
func (s *Scheduler) GenerateTogether(ctx context.Context, prompts [][]int32, capacity int, o GenerateOptions) error {
	errs := make(chan error, len(prompts))
	s.Pause()
	for _, p := range prompts {
		go func() {
			_, err := s.Generate(ctx, p, capacity, o)
			errs <- err
		}()
	}
	for s.Waiting() < len(prompts) {
		time.Sleep(time.Millisecond)
	}
	s.Resume()
	var first error
	for range prompts {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// loop runs steps while there is work and sleeps otherwise. Cancellation of a waiting or
// running sequence is noticed between steps; a context's end also wakes the loop.
func (s *Scheduler) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			s.shutdown()
			return
		}
		s.reap()
		s.admit()
		if len(s.active) == 0 {
			s.sleep()
			continue
		}
		s.step()
	}
}

// sleep waits for a new sequence, Close, or the end of a waiting sequence's context.
func (s *Scheduler) sleep() {
	s.mu.Lock()
	var ctxs []<-chan struct{}
	var first time.Time
	for _, q := range s.waiting {
		ctxs = append(ctxs, q.ctx.Done())
		if first.IsZero() || q.arrived.Before(first) {
			first = q.arrived
		}
	}
	s.mu.Unlock()
	if len(ctxs) == 0 {
		<-s.wake
		return
	}
	var timeout <-chan time.Time
	if s.o.MaxWait > 0 {
		t := time.NewTimer(time.Until(first.Add(s.o.MaxWait)))
		defer t.Stop()
		timeout = t.C
	}
	// A waiting sequence whose context ends must be answered although nothing else moves.
	stop := make(chan struct{})
	defer close(stop)
	any := make(chan struct{}, 1)
	for _, c := range ctxs {
		go func() {
			select {
			case <-c:
				select {
				case any <- struct{}{}:
				default:
				}
			case <-stop:
			}
		}()
	}
	select {
	case <-s.wake:
	case <-any:
	case <-timeout:
	}
}

// reap ends waiting sequences whose context ended (they never ran) and active ones.
func (s *Scheduler) reap() {
	s.mu.Lock()
	kept := s.waiting[:0]
	var gone []*sequence
	now := time.Now()
	for _, q := range s.waiting {
		if q.ctx.Err() != nil || s.o.MaxWait > 0 && now.Sub(q.arrived) >= s.o.MaxWait {
			gone = append(gone, q)
			continue
		}
		kept = append(kept, q)
	}
	s.waiting = kept
	s.mu.Unlock()
	for _, q := range gone {
		q.t.g.PromptTokens = 0
		q.t.g.Queued = now.Sub(q.arrived)
		if err := q.ctx.Err(); err != nil {
			s.finish(q, fmt.Errorf("engine: stopped while waiting for a slot: %w", err))
			continue
		}
		s.finish(q, fmt.Errorf("%w: waited %v for one of %d slots and %d KV blocks", ErrAdmissionTimeout, q.t.g.Queued.Round(time.Millisecond), s.o.Slots, ml.BlocksFor(q.capacity, s.o.BlockSize)))
	}
	active := s.active[:0]
	for _, q := range s.active {
		if err := q.ctx.Err(); err != nil {
			if q.decoding {
				err = fmt.Errorf("engine: decode stopped: %w", err)
			} else {
				q.t.g.PromptTokens = q.pos
				err = fmt.Errorf("engine: prefill stopped after %d of %d tokens: %w", q.pos, len(q.prompt), err)
			}
			s.finish(q, err)
			continue
		}
		active = append(active, q)
	}
	s.active = active
}

// admit moves waiting sequences into free slots, in arrival order, while the pool has the
// blocks for the first of them (a later, smaller one does not overtake it, so a long
// document is not starved by a stream of short ones).
func (s *Scheduler) admit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.paused && len(s.waiting) > 0 && len(s.active) < s.o.Slots {
		q := s.waiting[0]
		if s.awaitsPrefix(q) {
			return
		}
		st, err := s.newState(q)
		if errors.Is(err, ml.ErrPoolFull) {
			return
		}
		s.waiting = s.waiting[1:]
		if err == nil && q.snap != nil {
			if err = st.Restore(s.m.Backend, q.pos, q.snap); err != nil {
				st.Free()
				err = fmt.Errorf("engine: copy the state after the prompt: %w", err)
			}
			q.snap, q.started = nil, time.Now()
		}
		if err != nil {
			s.mu.Unlock()
			s.finish(q, err)
			s.mu.Lock()
			continue
		}
		q.state, q.admitted = st, time.Now()
		q.t.g.Queued = q.admitted.Sub(q.arrived)
		s.active = append(s.active, q)
	}
}

// step runs one forward pass over every active sequence.
func (s *Scheduler) step() {
	// A fork just admitted samples its first token from the logits after the prompt; from
	// the next token on it is fed like any decoding sequence.
	var forked []*sequence
	for _, q := range s.active {
		if q.first == nil {
			continue
		}
		l := q.first
		q.first = nil
		if s.guardedAdvance(q, 0, l) {
			forked = append(forked, q)
		}
	}
	s.drop(forked)
	if len(s.active) == 0 {
		return
	}
	start := time.Now()
	b := model.Batch{}
	budget := s.o.StepTokens
	var in []*sequence // sequences in the batch, in batch order
	var fed []int      // and their tokens in it
	decoding := 0
	for _, q := range s.active {
		if q.decoding {
			b = b.Add(q.state, []int32{q.next}, q.pos, true)
			in, fed = append(in, q), append(fed, 1)
			budget--
			decoding++
		}
	}
	for _, q := range s.active {
		if q.decoding || budget <= 0 {
			continue
		}
		n := min(len(q.prompt)-q.pos, budget)
		if s.checkpoints() {
			// A recurrent state exists only where a chunk ends: end this one at the last
			// block boundary it crosses within the prompt's whole blocks, so that the state
			// there can be cached (the longest prefix it reaches, and always the prompt's
			// last whole block).
			if end := min(q.pos+n, len(q.hashes)*s.o.BlockSize) / s.o.BlockSize * s.o.BlockSize; end > q.pos {
				n = end - q.pos
			}
		}
		b = b.Add(q.state, q.prompt[q.pos:q.pos+n], q.pos, q.pos+n == len(q.prompt))
		in, fed = append(in, q), append(fed, n)
		budget -= n
	}
	for _, q := range in {
		q.t.g.Batch = max(q.t.g.Batch, len(in))
	}
	logits, err := s.pass(b)
	if err != nil {
		// The states may hold part of the pass: every sequence in it fails.
		for _, q := range in {
			s.finish(q, err)
		}
		s.drop(in)
		return
	}
	vocab := s.m.Config().Vocab
	row := 0
	var ended []*sequence
	for i, q := range in {
		var l []float32
		if q.decoding || q.pos+fed[i] == len(q.prompt) {
			l = logits[row*vocab : (row+1)*vocab]
			row++
		}
		if s.guardedAdvance(q, fed[i], l) {
			ended = append(ended, q)
		}
	}
	s.drop(ended)
	if s.o.OnStep != nil {
		s.o.OnStep(StepStats{Sequences: len(in), Decoding: decoding, Tokens: len(b.Tokens), Duration: time.Since(start), FreeBlocks: s.pool.FreeBlocks()})
	}
}

// guardedAdvance is advance with the caller's callbacks (progress, streamed text) and
// sampler, which run here on the scheduler's goroutine, guarded: a panic in one ends that
// sequence, not the others.
func (s *Scheduler) guardedAdvance(q *sequence, fed int, logits []float32) bool {
	over := false
	if err := guard(func() { over = s.advance(q, fed, logits) }); err != nil {
		s.finish(q, err)
		over = true
	}
	return over
}

// advance takes a sequence's share of a step: fed tokens, and the logits of its last one
// when it has them. It reports whether the sequence ended, answered or not.
func (s *Scheduler) advance(q *sequence, fed int, logits []float32) bool {
	q.pos += fed
	if !q.decoding {
		s.cachePrompt(q)
		if q.o.OnPrefill != nil {
			q.o.OnPrefill(q.pos, len(q.prompt))
		}
		if logits == nil {
			return false // the prompt goes on in the next step
		}
		now := time.Now()
		q.t.g.Prefill = now.Sub(q.admitted)
		q.started, q.decoding = now, true
		if q.forks != nil {
			if err := s.fork(q, logits); err != nil {
				s.finish(q, err)
				return true
			}
		}
	}
	id, err := q.t.pick(logits)
	if err != nil {
		s.finish(q, err)
		return true
	}
	if q.t.accept(id, q.pos, q.capacity) {
		q.t.g.Decode = time.Since(q.started)
		q.t.result(false)
		s.finish(q, nil)
		return true
	}
	q.next = id
	return false
}

// fork starts q's other completions from its state after the prompt: each waits, ahead of
// every other sequence, for a slot and its blocks, and then starts from a copy of the state
// and of the logits.
func (s *Scheduler) fork(q *sequence, logits []float32) error {
	forks := q.forks
	q.forks = nil
	snap, err := q.state.Snapshot(s.m.Backend, q.pos)
	if err != nil {
		err = fmt.Errorf("engine: keep the state after the prompt: %w", err)
		for _, f := range forks {
			s.finish(f, err)
		}
		return err
	}
	now := time.Now()
	for _, f := range forks {
		f.snap, f.first, f.pos, f.decoding, f.arrived = snap, slices.Clone(logits), q.pos, true, now
		f.t.g.Prefill = q.t.g.Prefill
	}
	s.mu.Lock()
	s.waiting = append(forks, s.waiting...)
	s.mu.Unlock()
	return nil
}

// guard runs f, turning a panic into an *ml.PanicError (a CPU pool's is one already, with
// the stack that matters).
func guard(f func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			pe, ok := p.(*ml.PanicError)
			if !ok {
				pe = &ml.PanicError{Value: p, Stack: debug.Stack()}
			}
			err = pe
		}
	}()
	f()
	return nil
}

// pass runs one forward pass of b and reads its logits.
func (s *Scheduler) pass(b model.Batch) ([]float32, error) {
	if _, err := b.Runs(); err != nil {
		return nil, err
	}
	return runPass(s.m.Backend, func(ctx ml.Context) ml.Tensor { return s.m.Graph.Forward(ctx, b) })
}

// drop removes ended sequences from the active set.
func (s *Scheduler) drop(ended []*sequence) {
	if len(ended) == 0 {
		return
	}
	kept := s.active[:0]
	for _, q := range s.active {
		gone := false
		for _, e := range ended {
			gone = gone || e == q
		}
		if !gone {
			kept = append(kept, q)
		}
	}
	s.active = kept
}

// finish gives a sequence's blocks back and answers its Generate call. A context's end is
// reported as Session.Generate reports it: what was generated so far, FinishCancelled.
func (s *Scheduler) finish(q *sequence, err error) {
	if q.answered {
		return
	}
	q.answered = true
	if q.state != nil {
		q.state.Free()
		q.state = nil
	}
	if err != nil {
		if ctxErr := q.ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			if q.decoding && !q.started.IsZero() {
				q.t.g.Decode = time.Since(q.started)
			}
			if perr := guard(func() { q.t.result(true) }); perr != nil {
				err = perr
			}
		} else {
			q.t.g.Text = q.t.text.String()
		}
	}
	q.err = err
	close(q.finished)
	// Completions that were to start from this sequence's prompt never will.
	forks := q.forks
	q.forks = nil
	for _, f := range forks {
		if err == nil {
			err = errors.New("engine: the prompt's sequence ended before its state was copied")
		}
		s.finish(f, err)
	}
}

// shutdown answers every sequence of a closed scheduler.
func (s *Scheduler) shutdown() {
	s.mu.Lock()
	all := append(s.waiting, s.active...)
	s.waiting, s.active = nil, nil
	s.mu.Unlock()
	for _, q := range all {
		s.finish(q, ErrSchedulerClosed)
	}
}
