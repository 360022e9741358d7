package grammar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Matching. The state of a match is a set of stacks of the pushdown automaton: each stack's
// top is a byte-set element still to match, the frames below it the places to return to. A
// reference at the end of an alternative returns straight to its caller's frame (a tail
// call), so repetitions (star ::= x star) run in constant stack. Stacks are interned — the
// same (position, rest of stack) is one id — and so are sets of stacks: a state is a small
// integer, its successor on a byte is computed once and remembered, and inside a string
// every byte leads back to the same state. The allowed tokens of a state are found by
// walking a trie of the vocabulary's byte strings, cutting every subtree whose prefix no
// stack can match, and are remembered per state too.

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

// maxStates bounds the states one Matcher remembers; past it the caches start over (the
// match goes on, only slower), so an adversarial grammar cannot grow memory without end.
const maxStates = 1 << 14

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

// A Matcher follows one sequence's output through a Program and masks the logits of each
// step to the tokens that keep it inside the grammar. It is not safe for concurrent use;
// use one per sequence.
type Matcher struct {
	p *Program
	v *Vocab

	nodes  []node
	nodeID map[node]int32
	states []state // 0 is the dead state
	ids    map[string]int32
	masks  int

	cur    int32
	ended  bool  // an end-of-generation token was accepted
	err    error // the grammar proved too ambiguous to follow
	closed map[node]struct{}
	out    []int32
	accept bool
	walk   []int32
	key    []byte
	keep   []float32
}

// NewMatcher starts a match of p over v's tokens.
func NewMatcher(p *Program, v *Vocab) *Matcher {
	m := &Matcher{p: p, v: v}
	m.reset()
	return m
}

func (m *Matcher) reset() {
	m.nodes, m.nodeID = m.nodes[:0], map[node]int32{}
	m.states, m.ids = m.states[:0], map[string]int32{}
	m.masks = 0
	m.closed = map[node]struct{}{}
	m.intern(nil, false) // dead
	m.out, m.accept = m.out[:0], false
	for _, a := range m.p.rules[m.p.root] {
		m.close(a, -1)
	}
	m.cur = m.intern(m.out, m.accept)
	m.checkStacks()
}

func (m *Matcher) checkStacks() bool {
	if len(m.out) > maxStacks && m.err == nil {
		m.err = fmt.Errorf("grammar: more than %d ways to go on at once; the grammar is too ambiguous to follow (simplify nested optional or repeated parts)", maxStacks)
	}
	return m.err == nil
}

func (m *Matcher) stack(pos, parent int32) int32 {
	n := node{pos, parent}
	id, ok := m.nodeID[n]
	if !ok {
		id = int32(len(m.nodes))
		m.nodes = append(m.nodes, n)
		m.nodeID[n] = id
	}
	return id
}

// close adds to m.out the stacks reached from position pos with the frames parent below,
// expanding references until every top is a byte set; an end with nothing below accepts.
func (m *Matcher) close(pos, parent int32) {
	k := node{pos, parent}
	if _, seen := m.closed[k]; seen {
		return
	}
	m.closed[k] = struct{}{}
	switch e := m.p.elems[pos]; e.kind {
	case kindEnd:
		if parent < 0 {
			m.accept = true
			return
		}
		f := m.nodes[parent]
		m.close(f.pos, f.parent)
	case kindBytes:
		m.out = append(m.out, m.stack(pos, parent))
	case kindRef:
		ret := parent
		if m.p.elems[pos+1].kind != kindEnd {
			ret = m.stack(pos+1, parent)
		}
		for _, a := range m.p.rules[e.arg] {
			m.close(a, ret)
		}
	}
}

func (m *Matcher) intern(stacks []int32, accept bool) int32 {
	slices.Sort(stacks)
	stacks = slices.Compact(stacks)
	m.key = m.key[:0]
	if accept {
		m.key = append(m.key, 1)
	} else {
		m.key = append(m.key, 0)
	}
	for _, s := range stacks {
		m.key = binary.LittleEndian.AppendUint32(m.key, uint32(s))
	}
	if id, ok := m.ids[string(m.key)]; ok {
		return id
	}
	id := int32(len(m.states))
	m.states = append(m.states, state{stacks: slices.Clone(stacks), accept: accept})
	m.ids[string(m.key)] = id
	return id
}

// step is the state after byte b from state s (0: dead).
func (m *Matcher) step(s int32, b byte) int32 {
	st := &m.states[s]
	if st.next == nil {
		if len(st.stacks) == 0 {
			return 0
		}
		st.next = new([256]int32)
	}
	if n := st.next[b]; n != 0 {
		return n - 1
	}
	clear(m.closed)
	m.out, m.accept = m.out[:0], false
	if m.err != nil {
		return 0
	}
	for _, id := range st.stacks {
		n := m.nodes[id]
		if m.p.sets[m.p.elems[n.pos].arg].has(b) {
			m.close(n.pos+1, n.parent)
		}
	}
	next := int32(0)
	if !m.checkStacks() {
		return 0 // not remembered: every later step fails on m.err
	}
	if len(m.out) > 0 || m.accept {
		next = m.intern(m.out, m.accept)
	}
	m.states[s].next[b] = next + 1 // m.states may have moved
	return next
}

// Accepting reports whether the output so far is a complete sentence of the grammar (an
// end-of-generation token is allowed).
func (m *Matcher) Accepting() bool { return m.states[m.cur].accept }

// Done reports whether the output is complete and nothing can follow it, or an
// end-of-generation token was accepted: the sequence is over.
func (m *Matcher) Done() bool {
	return m.ended || (m.states[m.cur].accept && len(m.states[m.cur].stacks) == 0)
}

// allowed returns the bitset of the tokens allowed in the current state, end-of-generation
// tokens aside.
func (m *Matcher) allowed() []uint64 {
	if mk := m.states[m.cur].mask; mk != nil {
		return mk
	}
	if m.masks >= maxMasks {
		for i := range m.states {
			m.states[i].mask = nil
		}
		m.masks = 0
	}
	mask := make([]uint64, (m.v.size+63)/64)
	v := m.v
	if cap(m.walk) < v.depth+1 {
		m.walk = make([]int32, v.depth+1)
	}
	at := m.walk[:v.depth+1]
	at[0] = m.cur
	cur := m.cur
	for i := 0; i < len(v.b); {
		d := v.d[i]
		s := m.step(at[d], v.b[i])
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
	if len(m.states) > maxStates { // the walk made too many states: keep only the current one
		cur = m.restart()
	}
	m.cur = cur
	m.states[cur].mask = mask
	m.masks++
	return mask
}

// restart forgets every state but the current one, re-interned in fresh caches.
func (m *Matcher) restart() int32 {
	st := m.states[m.cur]
	var stacks [][]node // the current stacks as frame lists, to rebuild
	for _, id := range st.stacks {
		var frames []node
		for n := id; n >= 0; n = m.nodes[n].parent {
			frames = append(frames, m.nodes[n])
		}
		stacks = append(stacks, frames)
	}
	m.nodes, m.nodeID = nil, map[node]int32{}
	m.states, m.ids, m.masks = nil, map[string]int32{}, 0
	m.intern(nil, false)
	var ids []int32
	for _, frames := range stacks {
		parent := int32(-1)
		for i := len(frames) - 1; i >= 0; i-- {
			parent = m.stack(frames[i].pos, parent)
		}
		ids = append(ids, parent)
	}
	m.cur = m.intern(ids, st.accept)
	return m.cur
}

// Mask sets to -Inf the logits of every token that cannot continue the output: tokens whose
// bytes no stack can match, and end-of-generation tokens unless the grammar may end here.
// logits has one entry per id of the Vocab.
func (m *Matcher) Mask(logits []float32) error {
	if len(logits) != m.v.size {
		return fmt.Errorf("grammar: %d logits for a vocabulary of %d", len(logits), m.v.size)
	}
	if m.err != nil {
		return m.err
	}
	mask := m.allowed()
	if m.err != nil {
		return m.err
	}
	accept := m.Accepting()
	keep := m.keep[:0] // end-of-generation logits, given back when the grammar may end
	if accept {
		for _, id := range m.v.eog {
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
		for i, id := range m.v.eog {
			logits[id] = keep[i]
		}
	}
	return nil
}

// Allows reports whether token id may come next.
func (m *Matcher) Allows(id int32) bool {
	if id < 0 || int(id) >= m.v.size {
		return false
	}
	if slices.Contains(m.v.eog, id) {
		return m.Accepting()
	}
	s := m.cur
	for _, b := range m.v.bytes[id] {
		if s = m.step(s, b); s == 0 {
			return false
		}
	}
	return m.v.bytes[id] != nil
}

// Accept advances the match over token id; a token the grammar does not allow is an error
// and leaves the match where it was.
func (m *Matcher) Accept(id int32) error {
	if m.err != nil {
		return m.err
	}
	if m.ended {
		return fmt.Errorf("%w: token %d after the end of generation", ErrRejected, id)
	}
	if id < 0 || int(id) >= m.v.size {
		return fmt.Errorf("%w: token %d is outside the vocabulary of %d", ErrRejected, id, m.v.size)
	}
	if slices.Contains(m.v.eog, id) {
		if !m.Accepting() {
			return fmt.Errorf("%w: end of generation (token %d) before the grammar is complete", ErrRejected, id)
		}
		m.ended = true
		return nil
	}
	if m.v.bytes[id] == nil {
		return fmt.Errorf("%w: token %d has no text the grammar can match", ErrRejected, id)
	}
	s := m.cur
	for _, b := range m.v.bytes[id] {
		if s = m.step(s, b); s == 0 {
			if m.err != nil {
				return m.err
			}
			return fmt.Errorf("%w: token %d (%q) does not continue the grammar", ErrRejected, id, m.v.bytes[id])
		}
	}
	m.cur = s
	if len(m.states) > maxStates {
		m.restart()
	}
	return nil
}

// AcceptBytes advances the match over raw bytes (a forced prefix, a test).
func (m *Matcher) AcceptBytes(p []byte) error {
	if m.err != nil {
		return m.err
	}
	s := m.cur
	for i, b := range p {
		if s = m.step(s, b); s == 0 {
			if m.err != nil {
				return m.err
			}
			return fmt.Errorf("%w: byte %d (%q) of %q does not continue the grammar", ErrRejected, i, b, p)
		}
	}
	m.cur = s
	return nil
}

// Valid reports whether p, from the start, is a complete sentence of the program.
func (p *Program) Valid(text []byte) bool {
	m := NewMatcher(p, &Vocab{})
	return m.AcceptBytes(text) == nil && m.Accepting()
}
