package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlite/batch/internal/redisx"
)

// CapabilityVersion is the Version of the documents this package writes and routes on.
const CapabilityVersion = 2

// Capability is what a worker publishes about itself (README.md, "The fleet"): what it serves
// and how long a job it can hold. The planner's inputs (profile, calibration, policy) travel
// as JSON so that this package needs no planner; the worker computes MaxContext with the
// planner, and a client routes on it.
type Capability struct {
	Version int    `json:"version"` // 2: queues by capacity bucket (1: by memory class)
	ID      string `json:"id"`      // host:pid:random, the key's suffix
	Worker  string `json:"worker"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Build   string `json:"build"`
	// Model is the name results report; ModelKey is its form in queue names (ModelKey());
	// ModelFile is the GGUF's file name, which a payload may name too.
	Model            string          `json:"model"`
	ModelKey         string          `json:"model_key"`
	ModelFile        string          `json:"model_file"`
	ModelFingerprint string          `json:"model_fingerprint"` // file size + general.name
	Architecture     string          `json:"architecture"`
	Backend          string          `json:"backend"`
	Device           string          `json:"device"`
	GPULimitMiB      int64           `json:"gpu_limit_mib"`
	MarginMiB        int64           `json:"margin_mib"`
	BudgetSource     string          `json:"budget_source"`
	Calibration      json.RawMessage `json:"calibration"` // planner.Calibration
	Profile          json.RawMessage `json:"profile"`     // planner.Profile
	Policy           json.RawMessage `json:"policy"`      // planner.Policy
	Slots            int             `json:"slots"`
	// ExpertResidency is how a batching worker (Slots > 1) holds the routed experts for all
	// its jobs, as its pool was planned: "full" (every expert resident, or none to hold) or
	// "cache" (a bounded cache of ExpertCacheMiB that every running sequence shares). Empty
	// for a worker of one slot, which plans it per job.
	ExpertResidency string `json:"expert_residency,omitempty"`
	ExpertCacheMiB  int64  `json:"expert_cache_mib,omitempty"`
	// MaxContext is the longest prompt + max_tokens the worker's planner takes (per slot,
	// with its policy and slots, in the KV precision of those its policy allows that holds
	// the most): a job fits exactly when its context is at most this. The worker's queues
	// follow from it (WorkerQueues).
	MaxContext int `json:"max_context"`
	// Largest lists the longest prompt the worker takes per KV precision and max_tokens.
	Largest []LargestPrompt `json:"largest"`
	Tokens  TokenStats      `json:"tokens"`
	Queues  map[string]int  `json:"queues"`
	// Prefixes are keys (PrefixKeys, RecordedPrefixes) of the prompts of the jobs the worker
	// ran lately, most recent first, at most MaxPublishedPrefixes, published while its prefix
	// cache is on: clients route jobs that share them to its own queue (AffinityQueue). They
	// say what it read, not what its cache still holds.
	Prefixes []string `json:"prefixes,omitempty"`
	// Draining is set while the worker shuts down: it takes no new job and is not routed to.
	Draining bool      `json:"draining"`
	Started  time.Time `json:"started"`
	Updated  time.Time `json:"updated"`
}

// LargestPrompt is the longest prompt a worker plans with KV precision KV and max_tokens
// MaxTokens (0: not even one token).
type LargestPrompt struct {
	KV           string `json:"kv"`
	MaxTokens    int    `json:"max_tokens"`
	PromptTokens int    `json:"prompt_tokens"`
}

// TokenStats let a client that has no tokenizer estimate a prompt's length in the worker's
// tokens: BytesPerToken is measured on English text (the summarize prompt), MaxTokenBytes is
// the longest token in the vocabulary (so bytes/MaxTokenBytes never overcounts), and
// TemplateTokens is what the chat template adds around a system and a user message.
type TokenStats struct {
	BytesPerToken  float64 `json:"bytes_per_token"`
	MaxTokenBytes  int     `json:"max_token_bytes"`
	TemplateTokens int     `json:"template_tokens"`
}

// Redis keys of the capabilities, beside asynq's own. Each worker's document lives under
// CapabilityKey with a TTL refreshed by its heartbeat; CapabilitiesIndex is a sorted set of
// the worker ids by expiry, so that a reader lists them without SCAN.
const (
	CapabilitiesIndex = "redlite:capabilities"
	capabilityPrefix  = "redlite:capability:"
)

// CapabilityKey is the key of one worker's capability document.
func CapabilityKey(id string) string { return capabilityPrefix + id }

// Serves reports whether a payload's "model" names this worker's model: its name (any
// case), its file name, or the file name without .gguf; empty names any model.
func (c Capability) Serves(model string) bool {
	if model == "" {
		return true
	}
	return strings.EqualFold(model, c.Model) || (c.ModelFile != "" && (model == c.ModelFile || model == strings.TrimSuffix(c.ModelFile, ".gguf")))
}

// UsableMiB is the limit plans may use: the GPU limit less the margin.
func (c Capability) UsableMiB() int64 { return c.GPULimitMiB - c.MarginMiB }

// ModelKey turns a model name into its form in queue names: lower case, runs of anything
// but letters, digits, '.', '_' and '-' as one '-', at most 64 bytes.
func ModelKey(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			if !dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = true
			continue
		}
		b.WriteRune(r)
		dash = false
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 64 {
		s = s[:64]
	}
	if s == "" {
		return "model"
	}
	return s
}

// Capacity buckets. A job waits in the queue of a context length, its bucket, and a worker
// serves the buckets it holds every job of: each step of a grid (256, 384, 512, 768, 1024, …:
// powers of two and one and a half times them) up to its MaxContext, and its MaxContext
// itself, which no grid step may equal. So a job whose context is at most some live worker's
// MaxContext always has a bucket that such a worker serves, and every worker that serves it
// holds the job: routing is by what a worker holds (its slots, KV precision, limit and
// backend all go into MaxContext), not by its memory.
const (
	minBucket    = 256
	bucketPrefix = "ctx"
)

// nextBucket is the grid step after s (a step); past any real context the grid ends in the
// largest int, so that loops over it end.
func nextBucket(s int) int {
	switch {
	case s > math.MaxInt/4:
		return math.MaxInt
	case s&(s-1) == 0:
		return s + s/2
	}
	return s / 3 * 4
}

// CapacityBuckets lists, ascending, the buckets a worker that holds maxContext tokens serves.
func CapacityBuckets(maxContext int) []int {
	var out []int
	for s := minBucket; s < maxContext && s < math.MaxInt; s = nextBucket(s) {
		out = append(out, s)
	}
	if maxContext > 0 {
		out = append(out, maxContext)
	}
	return out
}

// BucketFor is the smallest bucket of a worker that holds maxContext tokens whose jobs may
// need need tokens: the grid step at or above need, or maxContext itself when that step is
// beyond it; ok is false when the worker does not hold need.
func BucketFor(maxContext, need int) (bucket int, ok bool) {
	if need > maxContext || maxContext < 1 {
		return 0, false
	}
	s := minBucket
	for s < need && s < math.MaxInt {
		s = nextBucket(s)
	}
	return min(s, maxContext), true
}

// ServesBucket reports whether a worker that holds maxContext tokens serves bucket.
func ServesBucket(maxContext, bucket int) bool {
	b, ok := BucketFor(maxContext, bucket)
	return ok && b == bucket
}

// ModelQueue is the queue of jobs for a model that no bucket was chosen for (enqueued
// anyway before any worker of the model ran): base@model. Every worker of the model serves it.
func ModelQueue(base, modelKey string) string { return base + "@" + modelKey }

// BucketQueue is the queue of jobs for a model that need at most bucket tokens of context:
// base@model@ctx<bucket>, e.g. default@tiny-qwen3@ctx16384.
func BucketQueue(base, modelKey string, bucket int) string {
	return ModelQueue(base, modelKey) + "@" + BucketName(bucket)
}

// BucketName is a bucket's part of its queue names: ctx<tokens>.
func BucketName(bucket int) string { return bucketPrefix + strconv.Itoa(bucket) }

// RoutedQueue is a queue name taken apart: base@model (Bucket 0), base@model@ctx<bucket>, or
// a worker's own queue, base@model@worker-<name> (Affinity set, AffinityQueue). A third part
// that is neither (the memory classes, "512m", of clients before buckets) leaves Bucket 0
// with Routed true.
type RoutedQueue struct {
	Base, ModelKey string
	Bucket         int
	Affinity       string // the worker's part (AffinityName) of its own queue
	Routed         bool   // a third part: a queue workers serve by capacity, or one worker's own
}

// ParseQueue takes a queue name apart; ok is false for a plain priority queue.
func ParseQueue(queue string) (q RoutedQueue, ok bool) {
	parts := strings.Split(queue, "@")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return RoutedQueue{}, false
	}
	q = RoutedQueue{Base: parts[0], ModelKey: parts[1]}
	if len(parts) == 3 {
		q.Routed = true
		digits, isBucket := strings.CutPrefix(parts[2], bucketPrefix)
		if n, err := strconv.Atoi(digits); isBucket && err == nil && n > 0 && BucketName(n) == parts[2] {
			q.Bucket = n
		} else if isAffinityName(parts[2]) {
			q.Affinity = parts[2]
		}
	}
	return q, true
}

// BaseQueue is the priority queue a routed queue belongs to ("default" for "default@m@ctx4096").
func BaseQueue(queue string) string { b, _, _ := strings.Cut(queue, "@"); return b }

// Weights of the queues a worker serves, relative to its priority queue's weight: the buckets
// of its top octave (above half its MaxContext), which smaller workers do not serve, first;
// smaller buckets (an idle big worker helps with small jobs), the model's unrouted queue and
// the plain priority queue (raw clients) after.
const (
	weightOwn   = 4
	weightOther = 1
)

// WorkerQueues returns the queues, with weights, that a worker of modelKey holding maxContext
// tokens serves, for the priority queues and weights in base (asynq.Config.Queues): each of
// its buckets (CapacityBuckets), the model's queue and the priority queue itself.
func WorkerQueues(base map[string]int, modelKey string, maxContext int) map[string]int {
	out := map[string]int{}
	buckets := CapacityBuckets(maxContext)
	for q, w := range base {
		out[q] = w
		out[ModelQueue(q, modelKey)] = w * weightOther
		for _, b := range buckets {
			wt := weightOther
			if 2*b > maxContext {
				wt = weightOwn
			}
			out[BucketQueue(q, modelKey, b)] = w * wt
		}
	}
	return out
}

// Capabilities lists the workers whose capability document is live (their heartbeat has not
// expired), by worker name. Entries of workers that died are pruned from the index. The
// documents are shared with later calls: read them, do not modify them.
func (c *Client) Capabilities(ctx context.Context) ([]Capability, error) {
	return c.caps.list(ctx, c.rdb)
}

// CapabilityScore is a document's score in CapabilitiesIndex when its key expires at expiry:
// a second later, so that an entry outlives its key and a reader that finds the entry
// without the key knows the worker is gone, and to the microsecond, so that every write of
// a document (each refresh, draining) changes its score and readers know to read it again.
func CapabilityScore(expiry time.Time) float64 { return float64(expiry.UnixMicro())/1e6 + 1 }

// capabilityCache keeps the documents it decoded by worker id, with their scores in the
// index: a document changes only with its score (CapabilityScore), so a reader lists the
// index (ZRANGE) and reads and decodes only the documents whose score changed, or whose key
// should have expired by the reader's clock (only Redis knows whether it has). Reading and
// decoding 64 documents of a few KB on every enqueue would cost more than the rest of it.
// A document whose key vanished early (evicted by a maxmemory policy) is taken for live until
// its score says it expired: at most REDLITE_CAPABILITY_TTL.
type capabilityCache struct {
	mu   sync.Mutex
	docs map[string]cachedCapability // replaced, never modified: readers share it
}

type cachedCapability struct {
	score float64
	cap   Capability
	ok    bool // the document decoded
}

func (cc *capabilityCache) list(ctx context.Context, rdb redis.UniversalClient) ([]Capability, error) {
	index, err := rdb.ZRangeWithScores(ctx, CapabilitiesIndex, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list worker capabilities: %w", redisx.Classify(err))
	}
	if len(index) == 0 {
		return nil, nil
	}
	cc.mu.Lock()
	old := cc.docs
	cc.mu.Unlock()
	now := time.Now()
	var read []int // positions in index of the documents to read
	var keys []string
	for i, z := range index {
		id, _ := z.Member.(string)
		d, seen := old[id]
		if !seen || d.score != z.Score || z.Score <= CapabilityScore(now) {
			read = append(read, i)
			keys = append(keys, CapabilityKey(id))
		}
	}
	docs := make(map[string]cachedCapability, len(index))
	for _, z := range index {
		id, _ := z.Member.(string)
		if d, seen := old[id]; seen && d.score == z.Score {
			docs[id] = d
		}
	}
	dead := false
	if len(keys) > 0 {
		vals, err := rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, fmt.Errorf("read worker capabilities: %w", redisx.Classify(err))
		}
		for j, v := range vals {
			z := index[read[j]]
			id, _ := z.Member.(string)
			s, ok := v.(string)
			if !ok {
				delete(docs, id)
				dead = true
				continue
			}
			d := cachedCapability{score: z.Score}
			// A newer or broken writer's document is not ours to route on.
			d.ok = json.Unmarshal([]byte(s), &d.cap) == nil
			docs[id] = d
		}
	}
	cc.mu.Lock()
	cc.docs = docs
	cc.mu.Unlock()
	if dead {
		// Entries past their expiry belong to workers that stopped refreshing them; a worker
		// that is starting has a fresh entry whose key follows at once.
		_ = rdb.ZRemRangeByScore(ctx, CapabilitiesIndex, "-inf", "("+strconv.FormatInt(now.Unix(), 10)).Err()
	}
	out := make([]Capability, 0, len(docs))
	for _, d := range docs {
		if d.ok {
			out = append(out, d.cap)
		}
	}
	slices.SortFunc(out, func(a, b Capability) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// RefusedKey is a Redis hash counting the jobs clients refused at submit, by reason
// (RefusedReason); workers export it as redlite_jobs_refused_total.
const RefusedKey = "redlite:stats:refused"

// RefusedReason is the field of RefusedKey a refusal counts under: unknown_model or
// no_capacity.
func RefusedReason(err error) string {
	if errors.Is(err, ErrUnknownModel) {
		return "unknown_model"
	}
	return "no_capacity"
}

// Routing errors, matched with errors.Is; the error is a *RouteError.
var (
	// ErrUnknownModel: no live worker serves the job's model.
	ErrUnknownModel = errors.New("no live worker serves the model")
	// ErrNoCapacity: no live worker of the model can hold the job.
	ErrNoCapacity = errors.New("no live worker can hold the job")
)

// RouteError says why a job was refused at submit, and what the fleet has.
type RouteError struct {
	Model  string
	Served []string // the models live workers serve
	// For ErrNoCapacity: the context the job needs at least (its prompt counted with the
	// fewest tokens it can have, plus max_tokens) and the worker that takes the longest.
	NeedContext int
	MaxTokens   int
	Largest     *Capability
	err         error
}

func (e *RouteError) Unwrap() error { return e.err }

func (e *RouteError) Error() string {
	if errors.Is(e.err, ErrUnknownModel) {
		if e.Model == "" {
			return fmt.Sprintf("model: the fleet serves several models, name one (served: %s)", strings.Join(e.Served, ", "))
		}
		return fmt.Sprintf("model: no live worker serves %q (served: %s)", e.Model, strings.Join(e.Served, ", "))
	}
	l := e.Largest
	msg := fmt.Sprintf("no live worker of model %s can hold this job: it needs a context of at least %d tokens (prompt %d at least + max_tokens %d), "+
		"and the largest job the fleet takes is %d tokens on worker %s (GPU limit %d MiB, %d slots)",
		l.Model, e.NeedContext, e.NeedContext-e.MaxTokens, e.MaxTokens, l.MaxContext, l.Worker, l.GPULimitMiB, l.Slots)
	if fit := e.MaxTokens - (e.NeedContext - l.MaxContext); fit > 0 {
		msg += fmt.Sprintf("; it fits with max_tokens ≤ %d", fit)
	}
	return msg
}

// Route is where a job goes: its queue, and whether it was planned against live workers.
type Route struct {
	Queue  string
	Bucket int // the context its queue's workers hold; 0 when not routed to a bucket
	Routed bool
	// Affinity lists the workers that hold the job and published a prefix of its prompt,
	// the longest first: the client sends it to the first whose own queue is not backed up
	// (Client.Enqueue), else to Queue.
	Affinity []Affinity
}

// Routable reports whether routing may send jobs to the worker: it is not shutting down, and
// its queues are by capacity bucket (a worker of an older version serves other queues; with
// only such workers live, jobs go to the plain priority queues, which every worker serves).
func (c Capability) Routable() bool { return !c.Draining && c.Version >= CapabilityVersion }

// HoldersBucket is where a job goes among workers (all of one model), need(c) being the
// context the job needs on worker c; ok is false when no worker holds it. It is the largest
// bucket that every worker which holds the job serves: the top of the smallest holder's
// grid (or its MaxContext when all holders hold the same), so that all holders take the job
// and the smallest of them with their top weight, and so that a fleet uses few queues: one
// per priority when its workers all hold the same, where a worker takes jobs in the order
// they came. When the job needs more than that grid step, it is the smallest holder's
// MaxContext, which the workers holding exactly that serve.
func HoldersBucket(workers []Capability, need func(Capability) int) (bucket int, ok bool) {
	least, most, same := 0, 0, true // the smallest holder's MaxContext, the largest need
	for _, c := range workers {
		n := need(c)
		if c.MaxContext < 1 || n > c.MaxContext {
			continue
		}
		if ok && c.MaxContext != least {
			same = false
		}
		if !ok || c.MaxContext < least {
			least = c.MaxContext
		}
		most, ok = max(most, n), true
	}
	if !ok {
		return 0, false
	}
	if step := gridBelow(least); !same && step >= most {
		return step, true
	}
	return least, true
}

// gridBelow is the largest grid step at or below n (0 for none).
func gridBelow(n int) int {
	below := 0
	for s := minBucket; s <= n && s < math.MaxInt; s = nextBucket(s) {
		below = s
	}
	return below
}

// LargestWorker is the worker of workers that holds the longest job (nil for none).
func LargestWorker(workers []Capability) *Capability {
	var largest *Capability
	for i, c := range workers {
		if largest == nil || c.MaxContext > largest.MaxContext {
			largest = &workers[i]
		}
	}
	return largest
}

// textBytes is the length of a payload's text as the model sees it, and whether it goes
// through the chat template.
func textBytes(p Payload) (int, bool) {
	n := 0
	switch p := p.(type) {
	case *Generate:
		if p.Prompt != "" {
			return len(p.Prompt), false
		}
		for _, m := range p.Messages {
			n += len(m.Content)
		}
	case *Summarize:
		for _, m := range SummarizeMessages(p) {
			n += len(m.Content)
		}
	}
	return n, true
}

func maxTokensOf(p Payload) int {
	switch p := p.(type) {
	case *Generate:
		return p.Sampling().MaxTokens
	case *Summarize:
		return p.Sampling().MaxTokens
	}
	return 0
}

// EstimatePrompt returns a payload's prompt length in a worker's tokens: an estimate (from
// the bytes per token of English text) and the fewest tokens it can be.
func EstimatePrompt(p Payload, t TokenStats) (estimate, least int) {
	n, chat := textBytes(p)
	extra := 0
	if chat {
		extra = t.TemplateTokens
	}
	least = 1
	if t.MaxTokenBytes > 0 && extra >= 0 {
		least = max(1, int(math.Ceil(float64(n)/float64(t.MaxTokenBytes)))+extra)
	}
	// One token per byte bounds a byte-level vocabulary, and any ratio a worker published.
	estimate = n + extra
	if t.BytesPerToken > 1 {
		estimate = int(math.Ceil(float64(n)/t.BytesPerToken)) + extra
	}
	return max(estimate, least), least
}

// RouteJob chooses the queue of p among the live workers in caps (Capabilities): the bucket
// that every worker of p's model which holds the job's estimated context serves, the
// smallest of them with their top weight (HoldersBucket), so that big workers keep their
// memory for big jobs. When the estimate
// fits no worker but the fewest tokens the prompt can have would, the job goes to the top
// bucket of the worker that holds the most, which tokenizes it and moves it on if it does not
// fit. A job that no live worker can hold is refused with a *RouteError (ErrUnknownModel,
// ErrNoCapacity), from the same comparison: the refusal names the worker that holds the most.
// With anyway it goes instead to that worker's top bucket, or to its model's queue when none
// serves it, to wait for workers not yet started. With no live worker at all the job goes to
// its priority queue unrouted, as before capabilities existed: there is nothing to plan
// against, and the first worker to take it routes it.
func RouteJob(caps []Capability, p Payload, anyway bool) (Route, error) {
	o := p.Options()
	base := QueueFor(o.Priority)
	live := false
	served := map[string]bool{}
	mine := make([]Capability, 0, len(caps)) // one allocation: documents are large
	for _, c := range caps {
		if !c.Routable() {
			continue
		}
		live = true
		served[c.Model] = true
		if c.Serves(o.Model) {
			mine = append(mine, c)
		}
	}
	if !live {
		if o.Model != "" && anyway {
			return Route{Queue: ModelQueue(base, ModelKey(o.Model))}, nil
		}
		return Route{Queue: base}, nil
	}
	keys := map[string]bool{}
	for _, c := range mine {
		keys[c.ModelKey] = true
	}
	if len(keys) != 1 {
		names := slices.Sorted(maps.Keys(served))
		if anyway && o.Model != "" {
			return Route{Queue: ModelQueue(base, ModelKey(o.Model))}, nil
		}
		return Route{}, &RouteError{Model: o.Model, Served: names, err: ErrUnknownModel}
	}
	key := mine[0].ModelKey
	to := func(bucket int, routed bool) Route {
		return Route{Queue: BucketQueue(base, key, bucket), Bucket: bucket, Routed: routed}
	}
	if splitsItself(p, StrategyHierarchical) {
		// The parent only splits and waits: a bucket every worker serves.
		if b, ok := HoldersBucket(mine, func(Capability) int { return 1 }); ok {
			return to(b, true), nil
		}
	}
	maxTokens := maxTokensOf(p)
	estimate := func(c Capability) int { e, _ := EstimatePrompt(p, c.Tokens); return e + maxTokens }
	least := func(c Capability) int { _, l := EstimatePrompt(p, c.Tokens); return l + maxTokens }
	if b, ok := HoldersBucket(mine, estimate); ok {
		r := to(b, true)
		holders := make([]Capability, 0, len(mine))
		for _, c := range mine {
			if estimate(c) <= c.MaxContext {
				holders = append(holders, c)
			}
		}
		r.Affinity = affinities(holders, p, base, key)
		return r, nil
	}
	largest := LargestWorker(mine)
	if _, ok := HoldersBucket(mine, least); ok {
		return to(largest.MaxContext, true), nil
	}
	if largest.MaxContext > 0 && (anyway || splitsItself(p, StrategyAuto)) {
		// An auto summary that no worker holds in one pass is summarized hierarchically by
		// the worker that takes it.
		return to(largest.MaxContext, !anyway), nil
	}
	if anyway {
		return Route{Queue: ModelQueue(base, key)}, nil // no worker holds the model at all
	}
	return Route{}, &RouteError{Model: largest.Model, NeedContext: least(*largest), MaxTokens: maxTokens, Largest: largest, err: ErrNoCapacity}
}
