package ml

import (
	"fmt"
	"sync"
)

// BlockList is the bookkeeping of a KVPool's blocks that every backend shares: which
// blocks are free, handed out lowest first, and given back when a sequence's cache is freed.
// It is safe for concurrent use.
type BlockList struct {
	blockSize, blocks int

	mu     sync.Mutex
	free   []int32 // taken from the end
	closed bool
}

// NewBlockList lists blocks blocks of blockSize positions, all free.
func NewBlockList(blocks, blockSize int) *BlockList {
	l := &BlockList{blockSize: blockSize, blocks: blocks, free: make([]int32, blocks)}
	for i := range l.free {
		l.free[i] = int32(blocks - 1 - i) // low blocks first
	}
	return l
}

// Take hands out the blocks that hold positions positions, in the order a cache's table
// uses them. It fails with an error wrapping ErrPoolFull when too few are free, and after
// Close.
func (l *BlockList) Take(positions int) ([]int32, error) {
	if positions <= 0 {
		return nil, fmt.Errorf("a cache of %d positions", positions)
	}
	need := BlocksFor(positions, l.blockSize)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("allocation from a freed KV pool")
	}
	if need > len(l.free) {
		return nil, fmt.Errorf("%d positions need %d blocks of %d, %d of %d free: %w", positions, need, l.blockSize, len(l.free), l.blocks, ErrPoolFull)
	}
	pages := append([]int32(nil), l.free[len(l.free)-need:]...)
	l.free = l.free[:len(l.free)-need]
	return pages, nil
}

// Give returns blocks from Take; after Close it does nothing.
func (l *BlockList) Give(pages []int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.free = append(l.free, pages...)
	}
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
