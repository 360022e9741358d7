package grammar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// Matching. The state of a match is a set of stacks of the pushdown automaton: each stack's
// top is a byte-set element still to match, the frames below it the places to return to. A
// reference at the end of an alternative returns straight to its caller's frame (a tail
// call), so repetitions (star ::= x star) run in constant stack. Stacks are interned — the
// same (position, rest of stack) is one id — and so are sets of stacks: a state is a small
// integer, its successor on a byte is computed once and remembered, and inside a string
// every byte leads back to the same state. The allowed tokens of a state are found by
// walking a trie of the vocabulary's byte strings, cutting every subtree whose prefix no
// stack can match, and are remembered per state too. The states of one Program over one
// Vocab are shared by all its matchers.

// A Vocab is a tokenizer's vocabulary as byte strings in a trie, built once per tokenizer
// and shared by every Matcher over it. It is immutable.
type Vocab struct {
	size int // logits per row (the model's vocabulary, may exceed the tokenizer's)
	// The trie in preorder: node i holds byte b[i] at depth d[i] (0 for the first byte),
	// its subtree ends before end[i], and the tokens spelled exactly by the path to it are
	// tok[first[i]:first[i+1]].
	b     []byte
	d     []uint16
	end   []int32
	first []int32
	tok   []int32
	bytes [][]byte // per token id, its bytes (nil: never allowed under a grammar)
	eog   []int32
	depth int
}

// NewVocab builds the vocabulary of size ids (the logits' row length) from each token's
// bytes (piece returns nil or "" for a token that no grammar may produce: control tokens,
// ids past the tokenizer) and the end-of-generation tokens.
func NewVocab(size int, piece func(id int32) string, eog []int32) *Vocab {
	v := &Vocab{size: size, bytes: make([][]byte, size)}
	for _, id := range eog {
		if id >= 0 && int(id) < size {
			v.eog = append(v.eog, id)
		}
	}
	var ids []int32
	for id := range int32(size) {
		if p := piece(id); p != "" && !slices.Contains(eog, id) {
			v.bytes[id] = []byte(p)
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if c := compareBytes(v.bytes[a], v.bytes[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	var path []int32 // node index per depth of the current path
	var prev []byte
	for _, id := range ids {
		s := v.bytes[id]
		l := 0
		for l < len(prev) && l < len(s) && prev[l] == s[l] {
			l++
		}
		for len(path) > l { // close the nodes below the common prefix
			v.end[path[len(path)-1]] = int32(len(v.b))
			path = path[:len(path)-1]
		}
		for i := l; i < len(s); i++ {
			path = append(path, int32(len(v.b)))
			v.b = append(v.b, s[i])
			v.d = append(v.d, uint16(min(i, math.MaxUint16)))
			v.end = append(v.end, 0)
			v.first = append(v.first, int32(len(v.tok)))
		}
		v.tok = append(v.tok, id) // the tokens of the node at path's top, in order
		v.depth = max(v.depth, len(s))
		prev = s
	}
	for _, n := range path {
		v.end[n] = int32(len(v.b))
	}
	v.first = append(v.first, int32(len(v.tok)))
	return v
}

func compareBytes(a, b []byte) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return int(a[i]) - int(b[i])
		}
	}
	return len(a) - len(b)
}

// Size is the number of logits per row the vocabulary masks.
func (v *Vocab) Size() int { return v.size }

// TrieNodes is the number of nodes of the vocabulary's trie.
func (v *Vocab) TrieNodes() int { return len(v.b) }

// ErrRejected is wrapped when a token cannot continue the grammar.
var ErrRejected = errors.New("grammar: token rejected")

// maxStates bounds the states an automaton remembers (each up to 1 KiB of transitions);
// past it the automaton is retired and its matchers go on from copies of their own states
// (only slower), so an adversarial grammar cannot grow memory without end. A variable so
// that a test can force the retirement.
var maxStates = 1 << 14

// maxStacks bounds the stacks of one state: an ambiguous grammar ("(a?){1000}") can have
// a stack for every way to go on, and each byte costs as many steps. Past it the match fails
// with an error saying so instead of slowing the batch it runs in.
const maxStacks = 1024

// maxMasks bounds the allowed-token sets remembered (each is size/8 bytes).
const maxMasks = 512

type node struct{ pos, parent int32 } // parent -1: the bottom of the stack

type state struct {
	stacks []int32 // interned stack ids, sorted
	accept bool    // the empty stack is among them: the grammar may end here
	next   *[256]int32
	mask   []uint64
}

// An automaton holds the states of one Program over one Vocab. The matchers of that pair
// share it, so the sequences of a batch under one schema compute each state's mask once;
// its lock is taken once per call of a Matcher's method.
type automaton struct {
	mu sync.Mutex
	p  *Program
	v  *Vocab

	nodes   []node
	nodeID  map[node]int32
	states  []state // 0 is the dead state
	ids     map[string]int32
	masks   int
	start   int32
	err     error       // the grammar proved too ambiguous to follow: every match fails
	retired atomic.Bool // too many states: its matchers move to copies of their state

	closed map[node]struct{}
	out    []int32
	accept bool
	walk   []int32
	key    []byte
}

func newAutomaton(p *Program, v *Vocab) *automaton {
	a := &automaton{p: p, v: v, nodeID: map[node]int32{}, ids: map[string]int32{}, closed: map[node]struct{}{}}
	a.intern(nil, false) // dead
	for _, alt := range p.rules[p.root] {
		a.close(alt, -1)
	}
	a.start = a.intern(a.out, a.accept)
	a.checkStacks()
	return a
}

// shared returns the automaton the matchers of p over v share.
func (p *Program) shared(v *Vocab) *automaton {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.automata[v]
	if a == nil || a.retired.Load() {
		if p.automata == nil {
			p.automata = map[*Vocab]*automaton{}
		}
		a = newAutomaton(p, v)
		p.automata[v] = a
	}
	return a
}

// A Matcher follows one sequence's output through a Program and masks the logits of each
// step to the tokens that keep it inside the grammar. It is not safe for concurrent use;
// use one per sequence. Matchers of one Program and Vocab share what they learn about the
// grammar's states (and may run on different goroutines).
type Matcher struct {
	a     *automaton
	cur   int32
	ended bool // an end-of-generation token was accepted
	keep  []float32
}

// NewMatcher starts a match of p over v's tokens.
func NewMatcher(p *Program, v *Vocab) *Matcher {
	a := p.shared(v)
	a.mu.Lock()
	defer a.mu.Unlock()
	return &Matcher{a: a, cur: a.start}
}

// lock locks the matcher's automaton, first moving to a copy of its state when the shared
// one was retired; the caller unlocks the automaton it returns.
func (m *Matcher) lock() *automaton {
	a := m.a
	a.mu.Lock()
	if a.retired.Load() {
		m.migrate()
		a.mu.Unlock()
		a = m.a
		a.mu.Lock()
	}
	return a
}

// settle retires the matcher's automaton when it holds too many states (the matcher moves
// to a copy of its own state; the Program starts a new shared one for later matchers).
func (m *Matcher) settle() {
	if len(m.a.states) > maxStates {
		m.a.retired.Store(true)
		m.migrate()
	}
}

// migrate moves m to a new automaton holding only its current state. The caller holds the
// old automaton's lock; the new one is m's alone until it is shared (never).
func (m *Matcher) migrate() {
	old := m.a
	st := old.states[m.cur]
	var stacks [][]node // the current stacks as frame lists, to rebuild
	for _, id := range st.stacks {
		var frames []node
		for n := id; n >= 0; n = old.nodes[n].parent {
			frames = append(frames, old.nodes[n])
		}
		stacks = append(stacks, frames)
	}
	a := &automaton{p: old.p, v: old.v, nodeID: map[node]int32{}, ids: map[string]int32{}, closed: map[node]struct{}{}, err: old.err}
	a.intern(nil, false)
	var ids []int32
	for _, frames := range stacks {
		parent := int32(-1)
		for i := len(frames) - 1; i >= 0; i-- {
			parent = a.stack(frames[i].pos, parent)
		}
		ids = append(ids, parent)
	}
	m.cur = a.intern(ids, st.accept)
	m.a = a
}

func (a *automaton) checkStacks() bool {
	if len(a.out) > maxStacks && a.err == nil {
		a.err = fmt.Errorf("grammar: more than %d ways to go on at once; the grammar is too ambiguous to follow (simplify nested optional or repeated parts)", maxStacks)
	}
	return a.err == nil
}

func (a *automaton) stack(pos, parent int32) int32 {
	n := node{pos, parent}
	id, ok := a.nodeID[n]
	if !ok {
		id = int32(len(a.nodes))
		a.nodes = append(a.nodes, n)
		a.nodeID[n] = id
	}
	return id
}

// close adds to a.out the stacks reached from position pos with the frames parent below,
// expanding references until every top is a byte set; an end with nothing below accepts.
func (a *automaton) close(pos, parent int32) {
	k := node{pos, parent}
	if _, seen := a.closed[k]; seen {
		return
	}
	a.closed[k] = struct{}{}
	switch e := a.p.elems[pos]; e.kind {
	case kindEnd:
		if parent < 0 {
			a.accept = true
			return
		}
		f := a.nodes[parent]
		a.close(f.pos, f.parent)
	case kindBytes:
		a.out = append(a.out, a.stack(pos, parent))
	case kindRef:
		ret := parent
		if a.p.elems[pos+1].kind != kindEnd {
			ret = a.stack(pos+1, parent)
		}
		for _, alt := range a.p.rules[e.arg] {
			a.close(alt, ret)
		}
	}
}

func (a *automaton) intern(stacks []int32, accept bool) int32 {
	slices.Sort(stacks)
	stacks = slices.Compact(stacks)
	a.key = a.key[:0]
	if accept {
		a.key = append(a.key, 1)
	} else {
		a.key = append(a.key, 0)
	}
	for _, s := range stacks {
		a.key = binary.LittleEndian.AppendUint32(a.key, uint32(s))
	}
	if id, ok := a.ids[string(a.key)]; ok {
		return id
	}
	id := int32(len(a.states))
	a.states = append(a.states, state{stacks: slices.Clone(stacks), accept: accept})
	a.ids[string(a.key)] = id
	return id
}

// step is the state after byte b from state s (0: dead).
func (a *automaton) step(s int32, b byte) int32 {
	st := &a.states[s]
	if st.next == nil {
		if len(st.stacks) == 0 {
			return 0
		}
		st.next = new([256]int32)
	}
	if n := st.next[b]; n != 0 {
		return n - 1
	}
	clear(a.closed)
	a.out, a.accept = a.out[:0], false
	if a.err != nil {
		return 0
	}
	for _, id := range st.stacks {
		n := a.nodes[id]
		if a.p.sets[a.p.elems[n.pos].arg].has(b) {
			a.close(n.pos+1, n.parent)
		}
	}
	next := int32(0)
	if !a.checkStacks() {
		return 0 // not remembered: every later step fails on a.err
	}
	if len(a.out) > 0 || a.accept {
		next = a.intern(a.out, a.accept)
	}
	a.states[s].next[b] = next + 1 // a.states may have moved
	return next
}

// allowed returns the bitset of the tokens allowed in state cur, end-of-generation tokens
// aside.
func (a *automaton) allowed(cur int32) []uint64 {
	if mk := a.states[cur].mask; mk != nil {
		return mk
	}
	if a.masks >= maxMasks {
		for i := range a.states {
			a.states[i].mask = nil
		}
		a.masks = 0
	}
	mask := make([]uint64, (a.v.size+63)/64)
	v := a.v
	if cap(a.walk) < v.depth+1 {
		a.walk = make([]int32, v.depth+1)
	}
	at := a.walk[:v.depth+1]
	at[0] = cur
	for i := 0; i < len(v.b); {
		d := v.d[i]
		s := a.step(at[d], v.b[i])
		if s == 0 {
			i = int(v.end[i])
			continue
		}
		at[d+1] = s
		for _, id := range v.tok[v.first[i]:v.first[i+1]] {
			mask[id>>6] |= 1 << (id & 63)
		}
		i++
	}
	a.states[cur].mask = mask
	a.masks++
	return mask
}

// Accepting reports whether the output so far is a complete sentence of the grammar (an
// end-of-generation token is allowed).
func (m *Matcher) Accepting() bool {
	a := m.lock()
	defer a.mu.Unlock()
	return a.states[m.cur].accept
}

// Done reports whether the output is complete and nothing can follow it, or an
// end-of-generation token was accepted: the sequence is over.
func (m *Matcher) Done() bool {
	a := m.lock()
	defer a.mu.Unlock()
	return m.ended || (a.states[m.cur].accept && len(a.states[m.cur].stacks) == 0)
}

// Mask sets to -Inf the logits of every token that cannot continue the output: tokens whose
// bytes no stack can match, and end-of-generation tokens unless the grammar may end here.
// logits has one entry per id of the Vocab.
func (m *Matcher) Mask(logits []float32) error {
	a := m.lock()
	defer func() { a.mu.Unlock() }()
	if len(logits) != a.v.size {
		return fmt.Errorf("grammar: %d logits for a vocabulary of %d", len(logits), a.v.size)
	}
	if a.err != nil {
		return a.err
	}
	mask := a.allowed(m.cur)
	if a.err != nil {
		return a.err
	}
	accept := a.states[m.cur].accept
	eog := a.v.eog
	m.settle()         // the walk may have made many states
	keep := m.keep[:0] // end-of-generation logits, given back when the grammar may end
	if accept {
		for _, id := range eog {
			keep = append(keep, logits[id])
		}
	}
	m.keep = keep
	inf := float32(math.Inf(-1))
	for w, bits := range mask {
		if bits == math.MaxUint64 {
			continue
		}
		base := w * 64
		for j := range min(64, len(logits)-base) {
			if bits&(1<<j) == 0 {
				logits[base+j] = inf
			}
		}
	}
	if accept {
		for i, id := range eog {
			logits[id] = keep[i]
		}
	}
	return nil
}

// Allows reports whether token id may come next.
func (m *Matcher) Allows(id int32) bool {
	a := m.lock()
	defer a.mu.Unlock()
	if id < 0 || int(id) >= a.v.size {
		return false
	}
	if slices.Contains(a.v.eog, id) {
		return a.states[m.cur].accept
	}
	s := m.cur
	for _, b := range a.v.bytes[id] {
		if s = a.step(s, b); s == 0 {
			return false
		}
	}
	return a.v.bytes[id] != nil
}

// Accept advances the match over token id; a token the grammar does not allow is an error
// and leaves the match where it was.
func (m *Matcher) Accept(id int32) error {
	a := m.lock()
	defer func() { a.mu.Unlock() }()
	if a.err != nil {
		return a.err
	}
	if m.ended {
		return fmt.Errorf("%w: token %d after the end of generation", ErrRejected, id)
	}
	if id < 0 || int(id) >= a.v.size {
		return fmt.Errorf("%w: token %d is outside the vocabulary of %d", ErrRejected, id, a.v.size)
	}
	if slices.Contains(a.v.eog, id) {
		if !a.states[m.cur].accept {
			return fmt.Errorf("%w: end of generation (token %d) before the grammar is complete", ErrRejected, id)
		}
		m.ended = true
		return nil
	}
	if a.v.bytes[id] == nil {
		return fmt.Errorf("%w: token %d has no text the grammar can match", ErrRejected, id)
	}
	s := m.cur
	for _, b := range a.v.bytes[id] {
		if s = a.step(s, b); s == 0 {
			if a.err != nil {
				return a.err
			}
			return fmt.Errorf("%w: token %d (%q) does not continue the grammar", ErrRejected, id, a.v.bytes[id])
		}
	}
	m.cur = s
	m.settle()
	return nil
}

// AcceptBytes advances the match over raw bytes (a forced prefix, a test).
func (m *Matcher) AcceptBytes(p []byte) error {
	a := m.lock()
	defer func() { a.mu.Unlock() }()
	if a.err != nil {
		return a.err
	}
	s := m.cur
	for i, b := range p {
		if s = a.step(s, b); s == 0 {
			if a.err != nil {
				return a.err
			}
			return fmt.Errorf("%w: byte %d (%q) of %q does not continue the grammar", ErrRejected, i, b, p)
		}
	}
	m.cur = s
	m.settle()
	return nil
}

// Valid reports whether text, from the start, is a complete sentence of the program.
func (p *Program) Valid(text []byte) bool {
	m := &Matcher{a: newAutomaton(p, &Vocab{})}
	m.cur = m.a.start
	return m.AcceptBytes(text) == nil && m.Accepting()
}
