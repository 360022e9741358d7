package tokenizer

import "sync"

// The word cache keeps the ids of words already merged: natural text repeats a few thousand
// words over and over, and a cached word costs one map lookup instead of a merge loop.
const (
	maxCachedWords   = 1 << 16 // then the cache starts over; a few MiB at most
	maxCachedWordLen = 64      // longer words (whitespace runs, base64) rarely repeat
)

type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func (c *wordCache) init() { c.m = make(map[string][]int32) }

func (c *wordCache) get(w string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[w]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	c.mu.Lock()
	if len(c.m) >= maxCachedWords {
		c.m = make(map[string][]int32)
	}
	c.m[w] = ids
	c.mu.Unlock()
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32 // token id, or a merge-only symbol id >= len(tokens)
	prev, next int32 // -1 at the ends
	dead       bool  // merged into its left neighbour
}

// candidate is a possible merge of the symbols at left and right. It is stale when either
// symbol has changed since it was queued (checked by their ids and adjacency).
type candidate struct {
	rank        int32
	left, right int32
	a, b        int32 // the symbol ids it merges
}

// before orders the queue as llama.cpp does: lowest rank first, then leftmost.
func (x candidate) before(y candidate) bool {
	return x.rank < y.rank || x.rank == y.rank && x.left < y.left
}

// bpeState is per-call scratch space, reused across the words of one Encode.
type bpeState struct {
	syms  []symbol
	queue []candidate
}

func (st *bpeState) push(c candidate) {
	q := append(st.queue, c)
	i := len(q) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !q[i].before(q[parent]) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
	st.queue = q
}

func (st *bpeState) pop() candidate {
	q := st.queue
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q) && q[l].before(q[m]) {
			m = l
		}
		if r < len(q) && q[r].before(q[m]) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	st.queue = q
	return top
}

func (t *Tokenizer) queuePair(st *bpeState, left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	a, b := st.syms[left].id, st.syms[right].id
	if m, ok := t.merges[pairKey(a, b)]; ok {
		st.push(candidate{rank: m.rank, left: left, right: right, a: a, b: b})
	}
}

// encodeWord appends the ids of one pre-tokenized word.
func (t *Tokenizer) encodeWord(st *bpeState, word string, out []int32) []int32 {
	cacheable := len(word) <= maxCachedWordLen
	if cacheable {
		if ids, ok := t.cache.get(word); ok {
			return append(out, ids...)
		}
	}
	start := len(out)
	out = t.merge(st, word, out)
	if cacheable {
		t.cache.put(word, append([]int32(nil), out[start:]...))
	}
	return out
}

// merge runs byte-level BPE on word: one symbol per byte, then repeatedly the best-ranked
// adjacent pair is merged until no pair has a merge rule.
func (t *Tokenizer) merge(st *bpeState, word string, out []int32) []int32 {
	if word == "" {
		return out
	}
	syms := st.syms[:0]
	for i := 0; i < len(word); i++ {
		syms = append(syms, symbol{id: t.byteSym[word[i]], prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[len(syms)-1].next = -1
	st.syms = syms
	st.queue = st.queue[:0]
	for i := 1; i < len(syms); i++ {
		t.queuePair(st, int32(i-1), int32(i))
	}
	for len(st.queue) > 0 {
		c := st.pop()
		l, r := &syms[c.left], &syms[c.right]
		if l.dead || r.dead || l.next != c.right || l.id != c.a || r.id != c.b {
			continue
		}
		l.id = t.merges[pairKey(c.a, c.b)].result
		l.next = r.next
		r.dead = true
		if r.next >= 0 {
			syms[r.next].prev = c.left
		}
		t.queuePair(st, l.prev, c.left)
		t.queuePair(st, c.left, l.next)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		out = t.appendSymbol(out, syms[i].id)
	}
	return out
}

// appendSymbol emits a merged symbol. A symbol that is not a token (possible only when the
// merge list names results missing from the vocabulary) falls back to its byte tokens;
// llama.cpp drops such symbols' non-ASCII bytes instead.
func (t *Tokenizer) appendSymbol(out []int32, id int32) []int32 {
	if int(id) < len(t.tokens) {
		return append(out, id)
	}
	raw := unmapBytes(t.symText[int(id)-len(t.tokens)])
	for i := 0; i < len(raw); i++ {
		if b := t.byteTok[raw[i]]; b >= 0 {
			out = append(out, b)
		}
	}
	return out
}
