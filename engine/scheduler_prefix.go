package engine

import (
	"errors"
	"log/slog"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

// The scheduler's side of the prefix cache: start a sequence from the longest cached prefix
// of its prompt, cache its prompt's blocks as it reads them, and give cached blocks back to
// the pool when a sequence needs them.

// checkpoints reports whether prompts must be cut at block boundaries: a hybrid model whose
// cache can hold recurrent checkpoints.
func (s *Scheduler) checkpoints() bool {
	return s.prefix.active() && s.prefix.recurrent
}

// awaitsPrefix reports whether q should wait for a running sequence that is reading blocks
// q's prompt starts with and the cache does not hold yet: admitted now, q would read them a
// second time (eight questions on one document, submitted together, would read it eight
// times). It waits at most until that sequence has read them and is admitted in order.
func (s *Scheduler) awaitsPrefix(q *sequence) bool {
	if !s.prefix.active() || q.snap != nil {
		return false
	}
	if q.hashes == nil {
		q.hashes = PrefixHashes(s.prefix.root, q.prompt, s.o.BlockSize)
	}
	usable := (len(q.prompt) - 1) / s.o.BlockSize
	for _, a := range s.active {
		if a.decoding || a.cachedTo >= len(a.hashes) {
			continue
		}
		// a will add blocks cachedTo+1 … len(a.hashes); does q share the next one?
		if k := a.cachedTo; k < usable && k < len(a.hashes) && q.hashes[k] == a.hashes[k] && !s.prefix.has(q.hashes[k]) {
			return true
		}
	}
	return false
}

// newState allocates q's state, from the longest cached prefix of its prompt when there is
// one (q.pos and CachedTokens say how far it goes). When the pool is short of blocks it drops
// cached prefixes that no sequence holds, least recently used first, as long as that can
// make room.
func (s *Scheduler) newState(q *sequence) (model.State, error) {
	if !s.prefix.active() || q.snap != nil {
		// A fork of GenerateN starts from its own copy of the state after the prompt.
		return s.m.Graph.NewPooledState(s.m.Backend, s.pool, q.capacity)
	}
	if q.hashes == nil {
		q.hashes = PrefixHashes(s.prefix.root, q.prompt, s.o.BlockSize)
	}
	for {
		st, err := s.restore(q)
		if err == nil {
			s.prefix.admitted()
		}
		if !errors.Is(err, ml.ErrPoolFull) {
			return st, err
		}
		need := ml.BlocksFor(q.capacity, s.o.BlockSize)
		if s.pool.FreeBlocks()+s.prefix.reclaimable() < need || !s.prefix.evictOldest(s.evict) {
			return nil, err
		}
	}
}

// restore makes q's state from the longest usable cached prefix: at most the prompt's whole
// blocks before its last token, whose logits must be computed.
func (s *Scheduler) restore(q *sequence) (model.State, error) {
	usable := q.hashes[:(len(q.prompt)-1)/s.o.BlockSize]
	// A snapshot on disk is read only when the pool can take the sequence: it is not read
	// again at every step while the sequence waits.
	e, payload, blocks := s.prefix.lookup(usable, s.pool.FreeBlocks() >= ml.BlocksFor(q.capacity, s.o.BlockSize))
	b := s.m.Backend
	switch {
	case e != nil:
		c, err := s.pool.AllocShared(e.kv, q.capacity)
		if err != nil {
			return nil, err
		}
		st, err := s.m.Graph.NewStateOn(b, c)
		if err != nil {
			return nil, err
		}
		if err := st.RestoreRecurrent(b, e.rec); err != nil {
			st.Free()
			return nil, err
		}
		s.started(q, blocks, false)
		return st, nil
	case payload != nil:
		st, err := s.m.Graph.NewPooledState(b, s.pool, q.capacity)
		if err != nil {
			return nil, err
		}
		if err := st.Restore(b, blocks*s.o.BlockSize, payload); err != nil {
			// A file that does not fit this model is a miss: start from nothing.
			slog.Warn("prefix cache: a snapshot on disk does not restore; prefilling instead", "err", err)
			st.Free()
			return s.m.Graph.NewPooledState(b, s.pool, q.capacity)
		}
		s.started(q, blocks, true)
		return st, nil
	}
	return s.m.Graph.NewPooledState(b, s.pool, q.capacity)
}

// started records that q begins after blocks cached blocks.
func (s *Scheduler) started(q *sequence, blocks int, disk bool) {
	q.pos = blocks * s.o.BlockSize
	q.cachedTo = blocks
	q.t.g.CachedTokens = q.pos
	s.prefix.hit(q.pos, disk)
}

// cachePrompt adds the prompt blocks q has read since the last call: every whole block for
// a model without recurrent layers; for a hybrid, the block that ends where q stands (chunks
// end at block boundaries, see step), with a copy of the recurrent state.
func (s *Scheduler) cachePrompt(q *sequence) {
	if !s.prefix.active() {
		return
	}
	upto := min(q.pos/s.o.BlockSize, len(q.hashes))
	if upto <= q.cachedTo {
		return
	}
	from := q.cachedTo
	if s.prefix.recurrent {
		if q.pos%s.o.BlockSize != 0 {
			return // mid-block: a budget smaller than a block ended this chunk
		}
		from = upto - 1
	}
	q.cachedTo = upto
	for k := from + 1; k <= upto; k++ {
		h := q.hashes[k-1]
		if s.prefix.has(h) {
			continue
		}
		kv, err := s.pool.Share(q.state.KV(), k)
		if err != nil {
			slog.Warn("prefix cache: sharing KV blocks", "err", err)
			return
		}
		e := &prefixEntry{hash: h, blocks: k, kv: kv}
		if s.prefix.recurrent {
			if e.rec, err = q.state.SaveRecurrent(s.m.Backend); err != nil {
				kv.Release()
				slog.Warn("prefix cache: copying the recurrent state", "err", err)
				return
			}
		}
		var prev PrefixHash
		if q.lastAdd != nil {
			prev = *q.lastAdd
		}
		if s.prefix.add(e, prev, q.lastAdd != nil, s.evict) {
			q.lastAdd = &e.hash
		}
	}
}

// evict lets go of an entry dropped from memory, spilling it to the directory first when it
// is the longest prefix its sequence left.
func (s *Scheduler) evict(e *prefixEntry) {
	defer e.kv.Release()
	if s.prefix.disk == nil || !e.tip {
		return
	}
	pos := e.blocks * s.o.BlockSize
	b := s.m.Backend
	c, err := s.pool.AllocShared(e.kv, pos)
	if err != nil {
		slog.Warn("prefix cache: spilling to disk", "err", err)
		return
	}
	st, err := s.m.Graph.NewStateOn(b, c)
	if err != nil {
		slog.Warn("prefix cache: spilling to disk", "err", err)
		return
	}
	defer st.Free()
	payload, err := func() ([]byte, error) {
		if err := st.RestoreRecurrent(b, e.rec); err != nil {
			return nil, err
		}
		return st.Snapshot(b, pos)
	}()
	if err == nil {
		err = s.prefix.disk.put(e.hash, pos, payload)
	}
	if err != nil {
		slog.Warn("prefix cache: spilling to disk", "err", err)
	}
}
