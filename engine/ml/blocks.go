package ml

import (
	"fmt"
	"sync"
)

// BlockList is the bookkeeping of a KVPool's blocks that every backend shares: which
// blocks are free, handed out lowest first, and given back when the last holder lets go.
// A block has one holder when taken; a prefix cache and the sequences that restore a prefix
// share it by reference (Hold), and it is free again only when every holder gave it back.
// It is safe for concurrent use.
type BlockList struct {
	blockSize, blocks int

	mu     sync.Mutex
	free   []int32 // taken from the end
	refs   []int32 // holders per block
	closed bool
}

// NewBlockList lists blocks blocks of blockSize positions, all free.
func NewBlockList(blocks, blockSize int) *BlockList {
	l := &BlockList{blockSize: blockSize, blocks: blocks, free: make([]int32, blocks), refs: make([]int32, blocks)}
	for i := range l.free {
		l.free[i] = int32(blocks - 1 - i) // low blocks first
	}
	return l
}

// Take hands out the blocks that hold positions positions, in the order a cache's table
// uses them. It fails with an error wrapping ErrPoolFull when too few are free, and after
// Close.
func (l *BlockList) Take(positions int) ([]int32, error) {
	return l.TakeAfter(nil, positions)
}

// TakeAfter is Take whose first blocks are prefix's, held once more by reference; only the
// blocks after them are taken from the free list.
func (l *BlockList) TakeAfter(prefix *SharedBlocks, positions int) ([]int32, error) {
	if positions <= 0 {
		return nil, fmt.Errorf("a cache of %d positions", positions)
	}
	need := BlocksFor(positions, l.blockSize)
	var head []int32
	if prefix != nil {
		if prefix.list != l {
			return nil, fmt.Errorf("shared blocks of another KV pool")
		}
		head = prefix.pages
	}
	if len(head) > need {
		return nil, fmt.Errorf("a cache of %d positions cannot start with %d shared blocks of %d", positions, len(head), l.blockSize)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("allocation from a freed KV pool")
	}
	if prefix != nil && prefix.released {
		return nil, fmt.Errorf("shared blocks used after Release")
	}
	fresh := need - len(head)
	if fresh > len(l.free) {
		return nil, fmt.Errorf("%d positions need %d blocks of %d (%d shared), %d of %d free: %w", positions, need, l.blockSize, len(head), len(l.free), l.blocks, ErrPoolFull)
	}
	pages := append(append(make([]int32, 0, need), head...), l.free[len(l.free)-fresh:]...)
	l.free = l.free[:len(l.free)-fresh]
	for _, p := range pages {
		l.refs[p]++
	}
	return pages, nil
}

// Give lets go of blocks from Take or TakeAfter: each is free again when its last holder
// gave it back. After Close it does nothing.
func (l *BlockList) Give(pages []int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	for _, p := range pages {
		if l.refs[p] <= 0 {
			panic(fmt.Sprintf("ml: KV block %d given back more often than taken", p))
		}
		l.refs[p]--
		if l.refs[p] == 0 {
			l.free = append(l.free, p)
		}
	}
}

// Hold takes one more reference on pages, blocks some cache holds: they stay out of the
// free list until the handle's Release, whatever happens to that cache.
func (l *BlockList) Hold(pages []int32) (*SharedBlocks, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("sharing blocks of a freed KV pool")
	}
	for _, p := range pages {
		if p < 0 || int(p) >= l.blocks || l.refs[p] <= 0 {
			return nil, fmt.Errorf("sharing KV block %d, which no cache holds", p)
		}
	}
	for _, p := range pages {
		l.refs[p]++
	}
	return &SharedBlocks{list: l, pages: append([]int32(nil), pages...)}, nil
}

// Free is the number of free blocks.
func (l *BlockList) Free() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.free)
}

// Close marks the pool freed: Take fails from now on.
func (l *BlockList) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.free, l.closed = nil, true
}

// Closed reports whether Close was called.
func (l *BlockList) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// SharedBlocks is a reference on the first blocks of a cache (a prefix of its positions),
// from KVPool.Share: the blocks are read-only from then on, and new caches can start with
// them (KVPool.AllocShared). Release gives the reference back.
type SharedBlocks struct {
	list     *BlockList
	pages    []int32
	released bool
}

// Len is the number of blocks held.
func (s *SharedBlocks) Len() int { return len(s.pages) }

// Pages are the blocks, in a cache table's order.
func (s *SharedBlocks) Pages() []int32 { return s.pages }

// Release gives the reference back; calling it twice is harmless.
func (s *SharedBlocks) Release() {
	s.list.mu.Lock()
	done := s.released
	s.released = true
	s.list.mu.Unlock()
	if !done {
		s.list.Give(s.pages)
	}
}

// Holders returns how many holders each of pages has now (0 after Close): with the
// references a caller knows of, what would be freed if it let go.
func (s *SharedBlocks) Holders(pages []int32) []int {
	s.list.mu.Lock()
	defer s.list.mu.Unlock()
	out := make([]int, len(pages))
	if s.list.closed {
		return out
	}
	for i, p := range pages {
		out[i] = int(s.list.refs[p])
	}
	return out
}
