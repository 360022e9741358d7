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
	// policyLRU evicts the slice used least recently. Measured on routing traces of the CPU
	// engine against policyLFU (TestSlotPolicyTrace, metalkit/README.md "Expert cache"):
	// the default.
	policyLRU slotPolicy = iota
	// policyLFU evicts the slice used least often since it came in, the least recent among
	// equals.
	policyLFU
)

func (p slotPolicy) String() string {
	if p == policyLFU {
		return "LFU"
	}
	return "LRU"
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
}

type slotState struct {
	key   sliceKey
	held  bool
	bytes int64
	pin   int64 // the epoch of the last lookup
	last  int64 // tick of the last lookup
	uses  int64 // lookups since the slice came in
}

func newExpertSlots(n int, policy slotPolicy, capacity int64) *expertSlots {
	if n <= 0 {
		panic(fmt.Sprintf("metalkit: expert cache of %d slots", n))
	}
	s := &expertSlots{policy: policy, n: n, at: map[sliceKey]int32{}, slot: make([]slotState, n), epoch: 1,
		prev: make([]int32, n), next: make([]int32, n), head: -1, tail: -1,
		stats: ml.ExpertStats{Capacity: capacity}}
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
	if i, ok := s.at[k]; ok {
		s.stats.Hits++
		s.touch(i)
		return i, false
	}
	s.stats.Misses++
	var i int32
	if n := len(s.free); n > 0 {
		i, s.free = s.free[n-1], s.free[:n-1]
	} else {
		i = s.victim()
		if i < 0 {
			panic("metalkit: expert cache lookup with every slot pinned")
		}
		old := &s.slot[i]
		delete(s.at, old.key)
		s.stats.Evictions++
		s.stats.Bytes -= old.bytes
	}
	s.slot[i] = slotState{key: k, held: true, bytes: bytes}
	s.at[k] = i
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

// victim is the unpinned held slot the policy evicts, -1 if every slot is pinned. LFU scans
// every slot (it serves the policy measurement; BenchmarkExpertSlots times both).
func (s *expertSlots) victim() int32 {
	if s.policy == policyLRU {
		for i := s.tail; i >= 0; i = s.prev[i] {
			if s.slot[i].pin != s.epoch {
				return i
			}
		}
		return -1
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

// before reports whether a gives way before b.
func (s *expertSlots) before(a, b *slotState) bool {
	if s.policy == policyLFU && a.uses != b.uses {
		return a.uses < b.uses
	}
	return a.last < b.last
}

// release unpins every slot: the dispatches that read them have run.
func (s *expertSlots) release() {
	s.epoch++
	s.pinned = 0
}
