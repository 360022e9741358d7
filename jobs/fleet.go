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
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlite/batch/internal/redisx"
)

// Capability is what a worker publishes about itself (README.md, "The fleet"): what it serves
// and how long a job it can hold. The planner's inputs (profile, calibration, policy) travel
// as JSON so that this package needs no planner; the worker computes MaxContext with the
// planner, and a client routes on it.
type Capability struct {
	Version int    `json:"version"`
	ID      string `json:"id"` // host:pid:random, the key's suffix
	Worker  string `json:"worker"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Build   string `json:"build"`
	// Model is the name results report; ModelKey is its form in queue names (ModelKey());
	// ModelFile is the GGUF's file name, which a payload may name too.
	Model            string `json:"model"`
	ModelKey         string `json:"model_key"`
	ModelFile        string `json:"model_file"`
	ModelFingerprint string `json:"model_fingerprint"` // file size + general.name
	Architecture     string `json:"architecture"`
	Backend          string `json:"backend"`
	Device           string `json:"device"`
	GPULimitMiB      int64  `json:"gpu_limit_mib"`
	MarginMiB        int64  `json:"margin_mib"`
	BudgetSource     string `json:"budget_source"`
	// Class is the capacity class (ClassOf the usable limit) whose queues the worker serves.
	Class       string          `json:"class"`
	Calibration json.RawMessage `json:"calibration"` // planner.Calibration
	Profile     json.RawMessage `json:"profile"`     // planner.Profile
	Policy      json.RawMessage `json:"policy"`      // planner.Policy
	Slots       int             `json:"slots"`
	// MaxContext is the longest prompt + max_tokens the worker's planner takes (per slot,
	// with its policy and slots): a job fits exactly when its context is at most this.
	MaxContext int `json:"max_context"`
	// Largest lists the longest prompt the worker takes per KV precision and max_tokens.
	Largest []LargestPrompt `json:"largest"`
	Tokens  TokenStats      `json:"tokens"`
	Queues  map[string]int  `json:"queues"`
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

// classStepsMiB are the capacity classes: a worker belongs to the largest step at or below
// its usable limit. Steps, not exact limits, so that Macs of one size share a class even
// when their limits differ by a few MiB (a 24 GiB Mac's limit is about 21,700 MiB: class
// 20g; a 48 GiB Mac's about 36,800 MiB: class 32g).
var classStepsMiB = []int64{256, 512, 1 << 10, 2 << 10, 4 << 10, 8 << 10, 12 << 10, 16 << 10, 20 << 10, 24 << 10,
	32 << 10, 40 << 10, 48 << 10, 64 << 10, 96 << 10, 128 << 10, 192 << 10, 256 << 10, 512 << 10}

func className(mib int64) string {
	if mib < 1<<10 {
		return strconv.FormatInt(mib, 10) + "m"
	}
	return strconv.FormatInt(mib>>10, 10) + "g"
}

// ClassOf is the capacity class of a worker with usableMiB to plan into ("0m" below the
// smallest step).
func ClassOf(usableMiB int64) string {
	name := "0m"
	for _, s := range classStepsMiB {
		if s <= usableMiB {
			name = className(s)
		}
	}
	return name
}

// ClassMiB is the step a class name stands for (0 for "0m" or a name that is no class).
func ClassMiB(class string) int64 {
	for _, s := range classStepsMiB {
		if className(s) == class {
			return s
		}
	}
	return 0
}

// ClassesBelow lists the classes smaller than class, largest first.
func ClassesBelow(class string) []string {
	var out []string
	top := ClassMiB(class)
	for i := len(classStepsMiB) - 1; i >= 0; i-- {
		if classStepsMiB[i] < top {
			out = append(out, className(classStepsMiB[i]))
		}
	}
	return out
}

// ModelQueue is the queue of jobs for a model that no class was chosen for (enqueued
// anyway before any worker of the model ran): base@model. Every worker of the model serves it.
func ModelQueue(base, modelKey string) string { return base + "@" + modelKey }

// ClassQueue is the queue of jobs for a model on workers of a capacity class: base@model@class.
func ClassQueue(base, modelKey, class string) string { return ModelQueue(base, modelKey) + "@" + class }

// BaseQueue is the priority queue a routed queue belongs to ("default" for "default@m@20g").
func BaseQueue(queue string) string { b, _, _ := strings.Cut(queue, "@"); return b }

// Weights of the queues a worker serves, relative to its priority queue's weight: its own
// class first, smaller classes (an idle big worker helps with small jobs), the model's
// unrouted queue and the plain priority queue (raw clients) after.
const (
	weightOwnClass = 4
	weightOther    = 1
)

// WorkerQueues returns the queues, with weights, that a worker of modelKey and class serves,
// for the priority queues and weights in base (asynq.Config.Queues): its class's queue at
// four times the weight, each of the smaller classes (those in smaller) and the model's
// queue at the weight, and the priority queue itself.
func WorkerQueues(base map[string]int, modelKey, class string, smaller []string) map[string]int {
	out := map[string]int{}
	for q, w := range base {
		out[q] = w
		out[ModelQueue(q, modelKey)] = w * weightOther
		out[ClassQueue(q, modelKey, class)] = w * weightOwnClass
		for _, c := range smaller {
			out[ClassQueue(q, modelKey, c)] = w * weightOther
		}
	}
	return out
}

// Capabilities lists the workers whose capability document is live (their heartbeat has not
// expired), by worker name. Entries of workers that died are pruned from the index.
func (c *Client) Capabilities(ctx context.Context) ([]Capability, error) {
	return listCapabilities(ctx, c.rdb)
}

func listCapabilities(ctx context.Context, rdb redis.UniversalClient) ([]Capability, error) {
	ids, err := rdb.ZRange(ctx, CapabilitiesIndex, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list worker capabilities: %w", redisx.Classify(err))
	}
	if len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = CapabilityKey(id)
	}
	vals, err := rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("read worker capabilities: %w", redisx.Classify(err))
	}
	var out []Capability
	var dead []any
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			dead = append(dead, ids[i])
			continue
		}
		var cp Capability
		if err := json.Unmarshal([]byte(s), &cp); err != nil {
			continue // a newer or broken writer's: not ours to route on
		}
		out = append(out, cp)
	}
	if len(dead) > 0 {
		// Entries past their expiry belong to workers that stopped refreshing them; a worker
		// that is starting has a fresh entry whose key follows at once.
		now := strconv.FormatInt(time.Now().Unix(), 10)
		_ = rdb.ZRemRangeByScore(ctx, CapabilitiesIndex, "-inf", "("+now).Err()
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
	msg := fmt.Sprintf("no live worker of model %s can hold this job: it needs a context of at least %d tokens (prompt + max_tokens %d), "+
		"and the largest job the fleet takes is %d tokens on worker %s (class %s, GPU limit %d MiB, %d slots)",
		l.Model, e.NeedContext, e.MaxTokens, l.MaxContext, l.Worker, l.Class, l.GPULimitMiB, l.Slots)
	if fit := e.MaxTokens - (e.NeedContext - l.MaxContext); fit > 0 {
		msg += fmt.Sprintf("; it fits with max_tokens ≤ %d", fit)
	}
	return msg
}

// Route is where a job goes: its queue, and whether it was planned against live workers.
type Route struct {
	Queue  string
	Class  string // "" when not routed to a class
	Routed bool
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

// RouteJob chooses the queue of p among the live workers in caps (Capabilities): the queue of
// the smallest capacity class whose every worker of p's model holds the job's estimated
// context, so that big workers keep their memory for big jobs. When the estimate fits no
// class but the fewest tokens the prompt can have would, the job goes to the largest class,
// whose worker tokenizes it and moves it on if it does not fit. A job that no live worker can
// hold is refused with a *RouteError (ErrUnknownModel, ErrNoCapacity); with anyway it goes
// instead to the largest class of its model, or to its model's queue when none serves it,
// to wait for workers not yet started. With no live worker at all the job goes to its
// priority queue unrouted, as before capabilities existed: there is nothing to plan against,
// and the first worker to take it routes it.
func RouteJob(caps []Capability, p Payload, anyway bool) (Route, error) {
	o := p.Options()
	base := QueueFor(o.Priority)
	var live []Capability
	for _, c := range caps {
		if !c.Draining {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		if o.Model != "" && anyway {
			return Route{Queue: ModelQueue(base, ModelKey(o.Model))}, nil
		}
		return Route{Queue: base}, nil
	}
	var mine []Capability
	served := map[string]bool{}
	for _, c := range live {
		served[c.Model] = true
		if c.Serves(o.Model) {
			mine = append(mine, c)
		}
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
	maxTokens := maxTokensOf(p)
	type class struct {
		name           string
		fitEst, fitMin bool
	}
	byClass := map[string]*class{}
	var largest *Capability
	least := math.MaxInt
	for i, c := range mine {
		est, lo := EstimatePrompt(p, c.Tokens)
		least = min(least, lo)
		cl := byClass[c.Class]
		if cl == nil {
			cl = &class{name: c.Class, fitEst: true, fitMin: true}
			byClass[c.Class] = cl
		}
		// A class is as good as its smallest worker: any of them may take the job.
		cl.fitEst = cl.fitEst && est+maxTokens <= c.MaxContext
		cl.fitMin = cl.fitMin && lo+maxTokens <= c.MaxContext
		if largest == nil || c.MaxContext > largest.MaxContext {
			largest = &mine[i]
		}
	}
	classes := make([]*class, 0, len(byClass))
	for _, c := range byClass {
		classes = append(classes, c)
	}
	slices.SortFunc(classes, func(a, b *class) int { return cmp.Compare(ClassMiB(a.name), ClassMiB(b.name)) })
	key := mine[0].ModelKey
	if splitsItself(p, StrategyHierarchical) {
		// The parent only splits and waits: the smallest class, which every worker serves.
		return Route{Queue: ClassQueue(base, key, classes[0].name), Class: classes[0].name, Routed: true}, nil
	}
	for _, c := range classes {
		if c.fitEst {
			return Route{Queue: ClassQueue(base, key, c.name), Class: c.name, Routed: true}, nil
		}
	}
	for i := len(classes) - 1; i >= 0; i-- {
		if classes[i].fitMin {
			c := classes[i].name
			return Route{Queue: ClassQueue(base, key, c), Class: c, Routed: true}, nil
		}
	}
	if anyway || splitsItself(p, StrategyAuto) {
		// An auto summary that no worker holds in one pass is summarized hierarchically by
		// the worker that takes it.
		return Route{Queue: ClassQueue(base, key, largest.Class), Class: largest.Class, Routed: !anyway}, nil
	}
	return Route{}, &RouteError{Model: largest.Model, NeedContext: least + maxTokens, MaxTokens: maxTokens, Largest: largest, err: ErrNoCapacity}
}
