package engine

import (
	"container/list"
	"context"
	"crypto/sha256"
	"fmt"
	"sync"

	"github.com/redlite/batch/engine/ml"
)

// PrefixStore is the prefix cache of sessions, which have no shared KV pool: it keeps
// whole-state snapshots (Session.Snapshot's payload) after the longest whole-block prefix of
// each prompt, bounded in bytes, the least recently used spilled to a bounded directory. A
// session given one (SessionOptions.Prefixes) starts Generate from the longest snapshot of
// its prompt and prefills only the rest. Its prefixes are named as the scheduler's
// (PrefixHashes), with the session's MTP setting folded into h_0 (an MTP session's snapshot
// holds the head's state too). It is safe for concurrent use.
type PrefixStore struct {
	m         *Model
	blockSize int
	o         PrefixCacheOptions
	disk      *prefixDisk

	mu      sync.Mutex
	roots   map[storeRoot]PrefixHash
	entries map[PrefixHash]*list.Element // of *storeEntry
	lru     list.List                    // most recently used first
	bytes   int64
	stats   PrefixStats
}

type storeRoot struct {
	kv  ml.DType
	mtp bool
}

type storeEntry struct {
	hash    PrefixHash
	pos     int
	payload []byte
}

// NewPrefixStore makes a store of prefixes of blockSize tokens (0: DefaultBlockSize).
func (m *Model) NewPrefixStore(blockSize int, o PrefixCacheOptions) (*PrefixStore, error) {
	if blockSize == 0 {
		blockSize = DefaultBlockSize
	}
	if blockSize < 1 || o.MaxBytes < 0 || o.MaxDiskBytes < 0 {
		return nil, fmt.Errorf("engine: prefix store of blocks of %d tokens, %d bytes in memory and %d on disk", blockSize, o.MaxBytes, o.MaxDiskBytes)
	}
	p := &PrefixStore{m: m, blockSize: blockSize, o: o, roots: map[storeRoot]PrefixHash{}, entries: map[PrefixHash]*list.Element{}}
	if o.Dir != "" && o.MaxDiskBytes > 0 {
		d, err := openPrefixDisk(o.Dir, o.MaxDiskBytes)
		if err != nil {
			return nil, err
		}
		p.disk = d
	}
	return p, nil
}

// hashes names the whole blocks of prompt for a session of precision kv and MTP setting mtp.
func (p *PrefixStore) hashes(kv ml.DType, mtp bool, prompt []int32) []PrefixHash {
	k := storeRoot{kv, mtp}
	p.mu.Lock()
	root, ok := p.roots[k]
	p.mu.Unlock()
	if !ok {
		r := p.m.PrefixRoot(kv, p.blockSize)
		root = sha256.Sum256(fmt.Appendf(r[:], ";session;mtp=%v", mtp))
		p.mu.Lock()
		p.roots[k] = root
		p.mu.Unlock()
	}
	return PrefixHashes(root, prompt, p.blockSize)
}

// lookup returns the longest snapshot among hashes, its positions (0 and nil for none) and
// whether it came from the directory.
func (p *PrefixStore) lookup(hashes []PrefixHash) (int, []byte, bool) {
	for i := len(hashes) - 1; i >= 0; i-- {
		pos := (i + 1) * p.blockSize
		p.mu.Lock()
		el := p.entries[hashes[i]]
		if el != nil {
			p.lru.MoveToFront(el)
			e := el.Value.(*storeEntry)
			p.mu.Unlock()
			return pos, e.payload, false
		}
		p.mu.Unlock()
		if p.disk != nil {
			if payload, ok := p.disk.get(hashes[i], pos); ok {
				return pos, payload, true
			}
		}
	}
	return 0, nil, false
}

// counted records a Generate that consulted the store and what it reused.
func (p *PrefixStore) counted(cached int, disk bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Lookups++
	if cached > 0 {
		p.stats.hit(cached, disk)
	}
}

// has reports whether h is held in memory.
func (p *PrefixStore) has(h PrefixHash) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.entries[h] != nil
}

// add keeps a snapshot, evicting the least recently used past MaxBytes (spilled to the
// directory when there is one). A snapshot larger than MaxBytes goes to the directory only.
func (p *PrefixStore) add(h PrefixHash, pos int, payload []byte) {
	size := int64(len(payload))
	var gone []*storeEntry
	p.mu.Lock()
	if p.entries[h] != nil {
		p.mu.Unlock()
		return
	}
	if size > p.o.MaxBytes {
		p.mu.Unlock()
		p.spill(&storeEntry{h, pos, payload})
		return
	}
	for p.bytes+size > p.o.MaxBytes {
		back := p.lru.Back()
		e := back.Value.(*storeEntry)
		p.lru.Remove(back)
		delete(p.entries, e.hash)
		p.bytes -= int64(len(e.payload))
		p.stats.Evictions++
		gone = append(gone, e)
	}
	p.entries[h] = p.lru.PushFront(&storeEntry{h, pos, payload})
	p.bytes += size
	p.mu.Unlock()
	for _, e := range gone {
		p.spill(e)
	}
}

func (p *PrefixStore) spill(e *storeEntry) {
	if p.disk != nil {
		p.disk.put(e.hash, e.pos, e.payload) // a failed write leaves the prefix uncached
	}
}

// Stats counts hits and what is held (KVBlocks is 0: snapshots hold their KV in Bytes).
func (p *PrefixStore) Stats() PrefixStats {
	p.mu.Lock()
	s := p.stats
	s.Entries, s.Bytes = len(p.entries), p.bytes
	p.mu.Unlock()
	if p.disk != nil {
		s.DiskEntries, s.DiskBytes = p.disk.usage()
	}
	return s
}

// prefillCached is Prefill for Generate: with a prefix store and an empty session, it starts
// from the longest stored prefix of prompt (g.CachedTokens), reads the rest, and stores the
// state after the prompt's longest whole-block prefix on the way.
func (s *Session) prefillCached(ctx context.Context, prompt []int32, o PrefillOptions, g *Generation) ([]float32, error) {
	p := s.prefixes
	if p == nil || s.pos != 0 || len(prompt) == 0 {
		return s.Prefill(ctx, prompt, o)
	}
	if err := s.check(prompt); err != nil {
		return nil, err
	}
	hashes := p.hashes(s.kvType, s.mtp, prompt)
	cached, payload, disk := p.lookup(hashes[:(len(prompt)-1)/p.blockSize])
	if payload != nil {
		if err := s.state.Restore(s.m.Backend, cached, payload); err != nil {
			// A snapshot that does not restore is a miss. The KV entries it may have
			// written are overwritten by the prefill from position 0; the recurrent state
			// must start from zeros again.
			cached = 0
			if err := s.zeroRecurrent(); err != nil {
				s.broken = err
				return nil, err
			}
		}
	}
	p.counted(cached, disk)
	s.pos, g.CachedTokens = cached, cached
	progress := o.Progress
	if progress != nil {
		// cached is where the Prefill call being run starts (it moves below).
		o.Progress = func(done, total int) { progress(cached+done, len(prompt)) }
	}
	rest := prompt[cached:]
	if whole := len(hashes) * p.blockSize; whole > cached && !p.has(hashes[len(hashes)-1]) {
		// Stop at the last whole block, keep the state there, then read the rest.
		logits, err := s.Prefill(ctx, prompt[cached:whole], o)
		if err != nil {
			return nil, err
		}
		if snap, err := s.state.Snapshot(s.m.Backend, whole); err == nil {
			p.add(hashes[len(hashes)-1], whole, snap)
		}
		if whole == len(prompt) {
			return logits, nil
		}
		cached, rest = whole, prompt[whole:]
	}
	return s.Prefill(ctx, rest, o)
}

// zeroRecurrent sets the recurrent state back to a fresh session's zeros.
func (s *Session) zeroRecurrent() error {
	rec, err := s.state.SaveRecurrent(s.m.Backend)
	if err != nil {
		return err
	}
	clear(rec)
	return s.state.RestoreRecurrent(s.m.Backend, rec)
}
