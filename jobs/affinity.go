package jobs

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redlite/batch/internal/redisx"
)

// Prefix affinity (docs/prefix-cache.md, "Across the fleet"). A worker whose prefix cache is
// on publishes keys of the prompts it ran lately (Capability.Prefixes), and a client sends a
// job whose prompt starts with one of them to that worker's own queue (AffinityQueue), which
// only it serves, so that the job starts from the state the worker cached instead of
// prefilling the shared part again. A client has no tokenizer, so the keys are over text,
// not tokens: the text the chat template receives, cut every PrefixStride bytes. It is a
// hint, not a promise: the engine may have evicted the state since, and then the job runs
// as it would anywhere else.

// PrefixStride is the text between two prefix keys: 1 KiB, about 256 tokens of English,
// one block of the engine's prefix cache. Shorter shared text is not worth routing for.
const PrefixStride = 1024

// MaxPublishedPrefixes bounds the keys a worker publishes: 256 keys of 16 hex digits keep
// the capability document under 5 KB more. A worker's cache holds a few dozen prefixes in
// memory at most (REDLITE_PREFIX_CACHE_MIB over a hybrid model's checkpoints), and each job
// adds at most recordedPrefixes keys.
const MaxPublishedPrefixes = 256

// Route by affinity only while the worker's own queue has fewer than this many jobs per slot
// waiting: beyond that a job waits longer there than its cached prefix saves, and a batch
// of 50,000 lines sharing one system prompt must spread over the fleet, not pile onto the
// one worker that read the prompt first.
const affinityBacklogPerSlot = 2

// affinityPrefix starts the third part of a worker's own queue names.
const affinityPrefix = "worker-"

// PrefixKeys are the keys of p's prompt prefixes for a model (its ModelKey): the i-th
// (from 0) names the first (i+1)·PrefixStride bytes of the prompt's text, chained, so that
// two prompts share their first k keys exactly when their texts share the first k strides.
// The text is what the model is given, in order: a raw prompt as it is, or each message's
// role and content (SummarizeMessages for a summary), so that a job whose messages extend
// another's shares its keys. A prompt shorter than one stride has none.
func PrefixKeys(p Payload, modelKey string) []string {
	k := newKeyChain(modelKey)
	switch p := p.(type) {
	case *Generate:
		if p.Prompt != "" {
			k.write("raw\x00")
			k.write(p.Prompt)
			break
		}
		k.messages(p.Messages)
	case *Summarize:
		k.messages(SummarizeMessages(p))
	}
	return k.keys
}

// keyChain hashes a text stride by stride: key_0 = SHA-256 of the seed, key_i = SHA-256 of
// key_{i−1} and the i-th stride; a key is its first 8 bytes in hex.
type keyChain struct {
	prev [sha256.Size]byte
	buf  []byte // the current stride so far
	keys []string
}

func newKeyChain(modelKey string) *keyChain {
	return &keyChain{prev: sha256.Sum256([]byte("redlite affinity v1;" + modelKey + ";" + strconv.Itoa(PrefixStride))), buf: make([]byte, 0, PrefixStride)}
}

func (k *keyChain) write(s string) {
	for len(s) > 0 {
		n := min(len(s), PrefixStride-len(k.buf))
		k.buf = append(k.buf, s[:n]...)
		s = s[n:]
		if len(k.buf) == PrefixStride {
			h := sha256.New()
			h.Write(k.prev[:])
			h.Write(k.buf)
			h.Sum(k.prev[:0])
			k.keys = append(k.keys, hex.EncodeToString(k.prev[:8]))
			k.buf = k.buf[:0]
		}
	}
}

// messages writes a chat in order; the separators (ASCII record and unit separators) keep a
// role's name from running into the content before it.
func (k *keyChain) messages(ms []Message) {
	k.write("chat\x00")
	for _, m := range ms {
		k.write("\x1e" + m.Role + "\x1f")
		k.write(m.Content)
	}
}

// recordedPrefixes is how many of a job's keys a worker records (RecordedPrefixes).
const recordedPrefixes = 12

// RecordedPrefixes is the part of a job's keys (PrefixKeys) that a worker which ran it
// records and publishes, longest first: the last four, where a later job asking something
// else about the same document most likely diverges, then going back by doubling distances
// (8, 16, 32, … strides from the end), at most recordedPrefixes. A later job is matched at
// the longest recorded key it shares, so a job that diverges d strides before the end of
// this one loses at most about d of them.
func RecordedPrefixes(keys []string) []string {
	var out []string
	for d := 0; d < len(keys) && len(out) < recordedPrefixes; {
		out = append(out, keys[len(keys)-1-d])
		if d < 3 {
			d++
		} else {
			d = 2*d + 1 // 3, 7, 15, 31, …: 4, 8, 16, 32 strides back
		}
	}
	return out
}

// AffinityName is a worker's part of its own queues' names: worker-<name as in ModelKey>.
func AffinityName(worker string) string { return affinityPrefix + ModelKey(worker) }

// AffinityQueue is a worker's own queue for jobs of priority queue base routed to it by
// prefix affinity: base@model@worker-<name>, e.g. default@tiny-qwen3@worker-mini-a. Only that
// worker serves it, above its other queues; names are stable across its restarts, so a
// worker that comes back takes what was left there, and the stranded sweep (daemon) moves
// what waits there once it is gone for good.
func AffinityQueue(base, modelKey, worker string) string {
	return ModelQueue(base, modelKey) + "@" + AffinityName(worker)
}

// weightAffinity is a worker's own queues' weight, relative to its priority queue's: above
// its top buckets (weightOwn), so that jobs routed to it for their prefix are taken first,
// while the prefix is most likely still cached.
const weightAffinity = 2 * weightOwn

// AffinityQueues returns a worker's own queues with their weights, for the priority queues
// and weights in base, as WorkerQueues does for its buckets.
func AffinityQueues(base map[string]int, modelKey, worker string) map[string]int {
	out := map[string]int{}
	for q, w := range base {
		out[AffinityQueue(q, modelKey, worker)] = w * weightAffinity
	}
	return out
}

// Affinity is a worker that holds a prefix of a job, as RouteJob found it.
type Affinity struct {
	Worker  string
	Queue   string // the worker's own queue (AffinityQueue) at the job's priority
	Strides int    // how many of the job's strides it holds (PrefixStride)
	Slots   int
}

// affinities lists the workers of holders (all of one model, each holding the job) whose
// published prefixes match a key of the job's, the longest match first, and only those that
// serve their own queue at base.
func affinities(holders []Capability, p Payload, base, modelKey string) []Affinity {
	var keys []string
	var at map[string]int
	var out []Affinity
	for _, c := range holders {
		if len(c.Prefixes) == 0 {
			continue
		}
		if keys == nil {
			if keys = PrefixKeys(p, modelKey); len(keys) == 0 {
				return nil
			}
			at = make(map[string]int, len(keys))
			for i, k := range keys {
				at[k] = i + 1
			}
		}
		q := AffinityQueue(base, modelKey, c.Worker)
		if c.Queues[q] == 0 {
			continue
		}
		best := 0
		for _, k := range c.Prefixes {
			best = max(best, at[k])
		}
		if best > 0 {
			out = append(out, Affinity{Worker: c.Worker, Queue: q, Strides: best, Slots: max(c.Slots, 1)})
		}
	}
	slices.SortFunc(out, func(a, b Affinity) int {
		return cmp.Or(cmp.Compare(b.Strides, a.Strides), cmp.Compare(a.Worker, b.Worker))
	})
	return out
}

// AffinityKey is a Redis hash counting the jobs clients routed by prefix affinity (field
// "routed"); workers export it as redlite_jobs_routed_by_affinity_total.
const AffinityKey = "redlite:stats:affinity"

// affinityQueue picks, among the route's affinities, the worker with the longest match whose
// own queue has fewer than affinityBacklogPerSlot jobs per slot pending (the least loaded of
// equal matches); "" when none, and the job goes to its bucket.
func (c *Client) affinityQueue(ctx context.Context, r Route) (string, error) {
	if len(r.Affinity) == 0 {
		return "", nil
	}
	cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, a := range r.Affinity {
			p.LLen(ctx, redisx.PendingKey(a.Queue))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read the backlog of workers holding the prefix: %w", redisx.Classify(err))
	}
	best, backlog := -1, int64(0)
	for i, a := range r.Affinity {
		n := cmds[i].(*redis.IntCmd).Val()
		if n >= int64(affinityBacklogPerSlot*a.Slots) {
			continue
		}
		if best >= 0 && a.Strides < r.Affinity[best].Strides {
			break
		}
		if best < 0 || n < backlog {
			best, backlog = i, n
		}
	}
	if best < 0 {
		return "", nil
	}
	return r.Affinity[best].Queue, nil
}

// isAffinityName reports whether a queue name's third part is a worker's (AffinityName).
func isAffinityName(part string) bool {
	return strings.HasPrefix(part, affinityPrefix) && len(part) > len(affinityPrefix)
}
