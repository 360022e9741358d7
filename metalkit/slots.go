package metalkit

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
)

// The bookkeeping of the bounded expert cache (experts.go): which expert slice — one expert's
// matrix of one weight — each slot of the arena holds, which slots the dispatches encoded
// since the last wait read (pinned: never a victim, so no GPU read races the host's copy into
// a slot), and which slot gives way on a miss. Nothing here touches the device, so the same
// code replays routing traces (the policy measurement in slots_test.go).

// slotPolicy chooses the victim among the unpinned slots.
type slotPolicy int

const (
	// policyShare is the expert caches' policy (engine/ml expertcache.go, the CPU's too)
	// where every slice used must take a slot: the slots beyond those a layer's step lately
	// pinned at once are shared equally among the weights seen (a slot per slice, whatever
	// its bytes), and a weight's share keeps the slices looked up most often lately. A slice
	// the CPU would read in place (its weight's share is full of slices used at least as
	// often) comes in as transient, and transients give way first, the least recent.
	// Measured against LRU and LFU on single and batched routing traces
	// (TestSlotPolicyTrace, metalkit/README.md "Expert cache"): the default.
	policyShare slotPolicy = iota
	// policyLRU evicts the slice used least recently: a global recency order, which a
	// batch thrashes (every layer's slices gone before the next step comes back to them).
	policyLRU
	// policyLFU evicts the slice used least often since it came in, the least recent among
	// equals.
	policyLFU
)

func (p slotPolicy) String() string {
	switch p {
	case policyLFU:
		return "LFU"
	case policyShare:
		return "share"
	}
	return "LRU"
}

// weightUse is policyShare's state of one weight.
type weightUse struct {
	resident []int32 // its slots not transient
	counts   ml.ExpertCounts
}

// sliceKey names an expert slice: the weight (its index among the expert weights bound) and
// the expert.
type sliceKey struct {
	weight, expert int
}

// expertSlots maps slices to the slots of an arena of n slots. Its users serialise calls.
type expertSlots struct {
	policy slotPolicy
	n      int
	at     map[sliceKey]int32
	slot   []slotState
	// epoch counts waits: a slot whose pin equals it is read by a dispatch not yet waited for.
	epoch  int64
	pinned int // slots pinned in this epoch
	tick   int64
	// free lists the slots never filled, taken before any eviction.
	free []int32
	// The held slots from the most to the least recently used (prev and next by slot, -1
	// ends): LRU's victim is the last unpinned one, found from the tail in a step or two
	// since the pinned slots were all used in this epoch.
	prev, next []int32
	head, tail int32
	stats      ml.ExpertStats
	use        map[int]*weightUse // by weight, for policyShare
	// peak is about the most slots an epoch pinned lately (it decays by an eighth a wait):
	// policyShare shares the other slots among the weights and leaves these to the
	// transient slices, so that a step's misses beyond the shares do not evict residents.
	peak int
	// transients lists the slots holding transient slices.
	transients []int32
}

type slotState struct {
	key   sliceKey
	held  bool
	bytes int64
	pin   int64 // the epoch of the last lookup
	last  int64 // tick of the last lookup
	uses  int64 // lookups since the slice came in
	// transient: under policyShare, a slice the CPU cache would read in place (not
	// admitted); on Metal it takes a slot, the first to give way.
	transient bool
	pos       int // in its weight's resident list or in transients
}

func newExpertSlots(n int, policy slotPolicy, capacity int64) *expertSlots {
	if n <= 0 {
		panic(fmt.Sprintf("metalkit: expert cache of %d slots", n))
	}
	s := &expertSlots{policy: policy, n: n, at: map[sliceKey]int32{}, slot: make([]slotState, n), epoch: 1,
		prev: make([]int32, n), next: make([]int32, n), head: -1, tail: -1,
		stats: ml.ExpertStats{Capacity: capacity}, use: map[int]*weightUse{}}
	for i := n - 1; i >= 0; i-- {
		s.free = append(s.free, int32(i))
		s.prev[i], s.next[i] = -1, -1
	}
	return s
}

// unpinned is the number of slots a round may still take without a wait.
func (s *expertSlots) unpinned() int { return s.n - s.pinned }

// isPinned reports whether k is held in a slot pinned in this epoch.
func (s *expertSlots) isPinned(k sliceKey) bool {
	i, ok := s.at[k]
	return ok && s.slot[i].pin == s.epoch
}

// needsWait reports whether looking up experts of weight w needs more slots than the
// unpinned ones: the dispatches encoded since the last wait must run first (release).
func (s *expertSlots) needsWait(w int, experts []int) bool {
	more := 0
	for _, x := range experts {
		if !s.isPinned(sliceKey{w, x}) {
			more++
		}
	}
	return more > s.unpinned()
}

// lookup returns the slot of k, pinning it, and whether it missed (the caller copies the
// slice in). Misses take a never-filled slot, else evict the policy's victim among the
// unpinned slots; the caller makes sure one exists (unpinned() > 0 or k pinned).
func (s *expertSlots) lookup(k sliceKey, bytes int64) (int32, bool) {
	s.tick++
	s.count(k)
	if i, ok := s.at[k]; ok {
		s.stats.Hits++
		s.touch(i)
		return i, false
	}
	s.stats.Misses++
	transient := s.policy == policyShare && s.transient(k)
	var i int32
	if n := len(s.free); n > 0 {
		i, s.free = s.free[n-1], s.free[:n-1]
	} else {
		i = s.victim(k)
		if i < 0 {
			panic("metalkit: expert cache lookup with every slot pinned")
		}
		old := &s.slot[i]
		delete(s.at, old.key)
		s.unlist(i)
		s.stats.Evictions++
		s.stats.Bytes -= old.bytes
	}
	s.slot[i] = slotState{key: k, held: true, bytes: bytes, transient: transient}
	s.at[k] = i
	s.list(i)
	s.stats.Bytes += bytes
	s.touch(i)
	return i, true
}

func (s *expertSlots) touch(i int32) {
	st := &s.slot[i]
	if st.pin != s.epoch {
		st.pin = s.epoch
		s.pinned++
	}
	st.last = s.tick
	st.uses++
	if s.head == i {
		return
	}
	if s.prev[i] >= 0 || s.tail == i { // in the list: unlink
		s.next[s.prev[i]] = s.next[i]
		if s.next[i] >= 0 {
			s.prev[s.next[i]] = s.prev[i]
		} else {
			s.tail = s.prev[i]
		}
	}
	s.prev[i], s.next[i] = -1, s.head
	if s.head >= 0 {
		s.prev[s.head] = i
	} else {
		s.tail = i
	}
	s.head = i
}

// count records a lookup of k.
func (s *expertSlots) count(k sliceKey) {
	u, ok := s.use[k.weight]
	if !ok {
		u = &weightUse{}
		s.use[k.weight] = u
	}
	u.counts.Look(k.expert)
}

// transient decides whether a miss of k comes in as a transient slice, as the CPU cache
// decides admission: no while its weight holds less than its share; else only if it is
// looked up more often lately than the weight's coldest resident slice, which is then
// demoted to transient (the next to give way).
func (s *expertSlots) transient(k sliceKey) bool {
	u := s.use[k.weight]
	if len(u.resident) < s.share() {
		return false
	}
	v := s.coldest(k.weight)
	if v < 0 || !u.counts.Admits(k.expert, s.slot[v].key.expert) {
		return true
	}
	s.unlist(v)
	s.slot[v].transient = true
	s.list(v)
	return false
}

// shareVictim is policyShare's victim, -1 if every slot is pinned: the least recently used
// transient slice, else the coldest resident slice of the weight furthest over its share,
// else (every weight within its share, or pinned) the least recently used.
func (s *expertSlots) shareVictim() int32 {
	best := int32(-1)
	for _, i := range s.transients {
		if st := &s.slot[i]; st.pin != s.epoch && (best < 0 || st.last < s.slot[best].last) {
			best = i
		}
	}
	if best >= 0 {
		return best
	}
	share := s.share()
	over, most := -1, 0
	for w, u := range s.use {
		if d := len(u.resident) - share; d > 0 && (over < 0 || d > most || d == most && w < over) && s.coldest(w) >= 0 {
			over, most = w, d
		}
	}
	if over >= 0 {
		return s.coldest(over)
	}
	return s.lruVictim()
}

// coldest is weight w's unpinned resident (not transient) slot looked up least often
// lately, the least recent among equals; -1 if none.
func (s *expertSlots) coldest(w int) int32 {
	best := int32(-1)
	u := s.use[w]
	for _, i := range u.resident {
		st := &s.slot[i]
		if st.pin == s.epoch {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &s.slot[best]
		if fa, fb := u.counts.Of(st.key.expert), u.counts.Of(b.key.expert); fa < fb || fa == fb && st.last < b.last {
			best = i
		}
	}
	return best
}

// list adds held slot i to its list: its weight's residents or the transients.
func (s *expertSlots) list(i int32) {
	st := &s.slot[i]
	l := &s.transients
	if !st.transient {
		l = &s.use[st.key.weight].resident
	}
	st.pos = len(*l)
	*l = append(*l, i)
}

// unlist removes held slot i from its list.
func (s *expertSlots) unlist(i int32) {
	st := &s.slot[i]
	l := &s.transients
	if !st.transient {
		l = &s.use[st.key.weight].resident
	}
	last := (*l)[len(*l)-1]
	(*l)[st.pos] = last
	s.slot[last].pos = st.pos
	*l = (*l)[:len(*l)-1]
}

// victim is the unpinned held slot the policy evicts for a miss of k, -1 if every slot is
// pinned. LFU and share scan slots (they serve the policy measurement; BenchmarkExpertSlots
// times LRU and LFU).
func (s *expertSlots) victim(k sliceKey) int32 {
	if s.policy == policyShare {
		return s.shareVictim()
	}
	if s.policy == policyLRU {
		return s.lruVictim()
	}
	best := int32(-1)
	for i := range s.slot {
		st := &s.slot[i]
		if !st.held || st.pin == s.epoch {
			continue
		}
		if best < 0 || s.before(st, &s.slot[best]) {
			best = int32(i)
		}
	}
	return best
}

// lruVictim is the least recently used unpinned held slot, -1 if none.
func (s *expertSlots) lruVictim() int32 {
	for i := s.tail; i >= 0; i = s.prev[i] {
		if s.slot[i].pin != s.epoch {
			return i
		}
	}
	return -1
}

// before reports whether a gives way before b.
func (s *expertSlots) before(a, b *slotState) bool {
	if s.policy == policyLFU && a.uses != b.uses {
		return a.uses < b.uses
	}
	return a.last < b.last
}

// share is policyShare's resident slots per weight.
func (s *expertSlots) share() int {
	return int(ml.ExpertShare(int64(max(s.n-s.peak, 0)), 1, int64(len(s.use))))
}

// release unpins every slot: the dispatches that read them have run.
func (s *expertSlots) release() {
	s.peak = max(s.pinned, s.peak-s.peak/8)
	s.epoch++
	s.pinned = 0
}
