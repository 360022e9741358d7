package engine

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/redlite/batch/engine/ml"
)

// The prefix cache. A scheduler's prompts are read in blocks of the KV pool's block size;
// after each whole block a sequence's state is named by a chained hash of its tokens so far
// (PrefixHashes). The attention keys and values of those blocks stay in the pool, shared by
// reference (ml.KVPool.Share): a later sequence whose prompt starts with the same blocks
// starts with the same blocks in its cache table and prefills only the rest. Sequences only
// append, so the blocks they share are never written again; the last, partial block of a
// prompt is always the sequence's own. Recurrent layers (Gated DeltaNet) have no per-position
// memory: their conv windows and delta states are copied at block boundaries (checkpoints)
// and held in an LRU bounded in bytes (PrefixCacheOptions.MaxBytes), optionally spilled to
// a bounded directory as whole-state snapshots (PrefixCacheOptions.Dir).

// PrefixHash names a prompt prefix of whole blocks: h_0 (Model.PrefixRoot) folds in the
// model file, the KV precision and the block size; h_i = SHA-256(h_{i−1} ‖ the tokens of
// block i as little-endian int32). Equal hashes mean equal tokens for the same model.
type PrefixHash [sha256.Size]byte

func (h PrefixHash) String() string { return hex.EncodeToString(h[:]) }

// PrefixRoot is h_0 of the prefix hashes of this model file with KV precision kv in blocks
// of blockSize positions.
func (m *Model) PrefixRoot(kv ml.DType, blockSize int) PrefixHash {
	h := sha256.New()
	fmt.Fprintf(h, "redlite prefix v1;%s;%016x;%v;%d", m.Config().Arch, m.fingerprint(), kv, blockSize)
	var out PrefixHash
	h.Sum(out[:0])
	return out
}

// PrefixHashes returns h_1 … h_n for the n whole blocks of blockSize tokens that tokens
// starts with.
func PrefixHashes(root PrefixHash, tokens []int32, blockSize int) []PrefixHash {
	out := make([]PrefixHash, len(tokens)/blockSize)
	buf := make([]byte, len(root)+4*blockSize)
	prev := root
	for i := range out {
		copy(buf, prev[:])
		for j, t := range tokens[i*blockSize : (i+1)*blockSize] {
			binary.LittleEndian.PutUint32(buf[len(root)+4*j:], uint32(t))
		}
		prev = sha256.Sum256(buf)
		out[i] = prev
	}
	return out
}

// PrefixCacheOptions configure a scheduler's prefix cache.
type PrefixCacheOptions struct {
	// MaxBytes bounds what the cache holds in memory beside the KV pool: the recurrent
	// checkpoints of hybrid models. The KV blocks it holds are the pool's, given back as soon
	// as a sequence needs them. 0: no checkpoints (a hybrid model's prefixes are not cached;
	// a dense model's still are).
	MaxBytes int64
	// Dir, when set, receives evicted prefixes as whole-state snapshots, at most MaxDiskBytes
	// of them (the least recently used go first); files already there are used when their
	// model, precision and block size match. Empty: no disk.
	Dir          string
	MaxDiskBytes int64
}

// PrefixStats count what a prefix cache did and holds.
type PrefixStats struct {
	Lookups     int64 // sequences admitted with the cache on
	Hits        int64 // of them, started from a cached prefix
	DiskHits    int64 // of the hits, read from the directory
	TokensSaved int64 // prompt tokens not prefilled thanks to hits
	Entries     int   // prefixes held in memory
	Bytes       int64 // recurrent checkpoints held in memory (bounded by MaxBytes)
	KVBlocks    int   // distinct pool blocks the entries hold
	DiskEntries int
	DiskBytes   int64 // bounded by MaxDiskBytes
	Evictions   int64 // entries dropped from memory (spilled or not)
}

// hit counts a sequence started from tokens cached positions, read from disk or memory.
func (s *PrefixStats) hit(tokens int, disk bool) {
	s.Hits++
	s.TokensSaved += int64(tokens)
	if disk {
		s.DiskHits++
	}
}

// prefixEntry is the state after a prefix of whole blocks.
type prefixEntry struct {
	hash   PrefixHash
	blocks int
	kv     *ml.SharedBlocks
	rec    []byte // recurrent checkpoint; nil for a model without recurrent layers
	tip    bool   // the longest prefix its sequence left: worth a spill
	elem   *list.Element
}

// prefixCache is the scheduler's; its methods are called from the scheduler's goroutine,
// except Stats.
type prefixCache struct {
	o         PrefixCacheOptions
	root      PrefixHash
	blockSize int
	recurrent bool // the model has recurrent layers: entries need checkpoints
	disk      *prefixDisk

	mu      sync.Mutex
	entries map[PrefixHash]*prefixEntry
	lru     list.List // of *prefixEntry, most recently used first
	bytes   int64
	held    map[int32]int // pool block → entries holding it
	stats   PrefixStats
}

func newPrefixCache(m *Model, kv ml.DType, blockSize int, o PrefixCacheOptions) (*prefixCache, error) {
	if o.MaxBytes < 0 || o.MaxDiskBytes < 0 {
		return nil, fmt.Errorf("engine: prefix cache of %d bytes in memory and %d on disk", o.MaxBytes, o.MaxDiskBytes)
	}
	c := &prefixCache{o: o, root: m.PrefixRoot(kv, blockSize), blockSize: blockSize, entries: map[PrefixHash]*prefixEntry{}, held: map[int32]int{}}
	if f, ok := m.Graph.(interface{ RecurrentBytes() int64 }); ok {
		c.recurrent = f.RecurrentBytes() > 0
	}
	if o.Dir != "" && o.MaxDiskBytes > 0 {
		d, err := openPrefixDisk(o.Dir, o.MaxDiskBytes)
		if err != nil {
			return nil, err
		}
		c.disk = d
	}
	return c, nil
}

// active reports whether the cache can hold anything for this model.
func (c *prefixCache) active() bool {
	return c != nil && (!c.recurrent || c.o.MaxBytes > 0)
}

// lookup returns the longest cached prefix of hashes, in memory or (with disk) on disk: a
// memory entry (touched), or a disk snapshot's payload, and its length in blocks.
func (c *prefixCache) lookup(hashes []PrefixHash, disk bool) (e *prefixEntry, payload []byte, blocks int) {
	for i := len(hashes) - 1; i >= 0; i-- {
		c.mu.Lock()
		e := c.entries[hashes[i]]
		if e != nil {
			c.lru.MoveToFront(e.elem)
		}
		c.mu.Unlock()
		if e != nil {
			return e, nil, i + 1
		}
		if disk && c.disk != nil {
			if p, ok := c.disk.get(hashes[i], (i+1)*c.blockSize); ok {
				return nil, p, i + 1
			}
		}
	}
	return nil, nil, 0
}

// admitted counts a sequence admitted with the cache on.
func (c *prefixCache) admitted() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Lookups++
}

// hit counts a sequence started from a prefix of tokens positions.
func (c *prefixCache) hit(tokens int, disk bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.hit(tokens, disk)
}

// has reports whether h is held in memory, and touches it.
func (c *prefixCache) has(h PrefixHash) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[h]
	if e != nil {
		c.lru.MoveToFront(e.elem)
	}
	return e != nil
}

// add holds a new entry, evicting the least recently used ones past MaxBytes (evict is
// called on each, outside the lock, to spill it). prev, when set, is the shorter prefix the
// same sequence added before: it goes to the cold end, so that memory keeps the longest
// prefixes first. It reports whether the entry was kept; if not, the caller's references
// are released.
func (c *prefixCache) add(e *prefixEntry, prev PrefixHash, hasPrev bool, evict func(*prefixEntry)) bool {
	size := int64(len(e.rec))
	if c.recurrent && (e.rec == nil || size > c.o.MaxBytes) {
		e.kv.Release()
		return false
	}
	var gone []*prefixEntry
	c.mu.Lock()
	if old := c.entries[e.hash]; old != nil {
		c.lru.MoveToFront(old.elem)
		c.mu.Unlock()
		e.kv.Release()
		return false
	}
	for c.bytes+size > c.o.MaxBytes && size > 0 {
		back := c.lru.Back()
		if back == nil {
			break
		}
		gone = append(gone, c.unlink(back.Value.(*prefixEntry)))
	}
	e.tip = true
	e.elem = c.lru.PushFront(e)
	c.entries[e.hash] = e
	c.bytes += size
	for _, p := range e.kv.Pages() {
		c.held[p]++
	}
	if hasPrev {
		if p := c.entries[prev]; p != nil {
			p.tip = false
			c.lru.MoveToBack(p.elem)
		}
	}
	c.mu.Unlock()
	for _, g := range gone {
		evict(g)
	}
	return true
}

// unlink drops e from the index; the caller holds mu and releases e afterwards.
func (c *prefixCache) unlink(e *prefixEntry) *prefixEntry {
	c.lru.Remove(e.elem)
	delete(c.entries, e.hash)
	c.bytes -= int64(len(e.rec))
	for _, p := range e.kv.Pages() {
		if c.held[p]--; c.held[p] == 0 {
			delete(c.held, p)
		}
	}
	c.stats.Evictions++
	return e
}

// evictOldest drops the least recently used entry (evict spills and releases it) and
// reports whether there was one: the scheduler's way to get pool blocks back.
func (c *prefixCache) evictOldest(evict func(*prefixEntry)) bool {
	c.mu.Lock()
	back := c.lru.Back()
	if back == nil {
		c.mu.Unlock()
		return false
	}
	e := c.unlink(back.Value.(*prefixEntry))
	c.mu.Unlock()
	evict(e)
	return true
}

// drain drops every entry without spilling (the scheduler is closing).
func (c *prefixCache) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for el := c.lru.Front(); el != nil; el = el.Next() {
		el.Value.(*prefixEntry).kv.Release()
	}
	c.lru.Init()
	c.entries = map[PrefixHash]*prefixEntry{}
	c.held = map[int32]int{}
	c.bytes = 0
}

// Stats counts hits and what is held.
func (c *prefixCache) Stats() PrefixStats {
	c.mu.Lock()
	s := c.stats
	s.Entries, s.Bytes, s.KVBlocks = len(c.entries), c.bytes, len(c.held)
	c.mu.Unlock()
	if c.disk != nil {
		s.DiskEntries, s.DiskBytes = c.disk.usage()
	}
	return s
}

// reclaimable is the number of pool blocks that dropping every entry would free: those no
// sequence holds.
func (c *prefixCache) reclaimable() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	back := c.lru.Back()
	if back == nil {
		return 0
	}
	pages := make([]int32, 0, len(c.held))
	for p := range c.held {
		pages = append(pages, p)
	}
	n := 0
	for i, h := range back.Value.(*prefixEntry).kv.Holders(pages) {
		if h == c.held[pages[i]] {
			n++
		}
	}
	return n
}
