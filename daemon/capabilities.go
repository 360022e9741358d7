package daemon

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/internal/buildinfo"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/metalkit"
	"github.com/redlite/batch/planner"
)

// The worker's capability document (jobs.Capability) tells clients what it serves and how
// long a job it holds, so that they route jobs to the smallest capacity bucket that a worker
// holding them serves (jobs.RouteJob) and refuse what no live worker holds. It is refreshed every REDLITE_CAPABILITY_TTL/6 and
// expires REDLITE_CAPABILITY_TTL after the last refresh: a worker killed without a word
// disappears from routing within the TTL; one that shuts down marks itself draining and
// deletes it.

// capabilityProbeMaxTokens are the max_tokens values Capability.Largest lists.
var capabilityProbeMaxTokens = []int{1024, 4096}

// capabilityOf describes this worker; queues are filled in by the caller. Its id is host,
// PID and a random part: tests run several daemons in one process.
// A batching worker (pool set) plans each job alone in its pool's precision, and holds at
// most the pool's positions.
func capabilityOf(name string, lm *loadedModel, budget planner.Budget, cal planner.Calibration, policy planner.Policy, slots int, pool *planner.Pool) (jobs.Capability, error) {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host" // as asynq does
	}
	planSlots, capped := slots, func(n int) int { return n }
	if pool != nil {
		policy, planSlots = batchPolicy(policy, pool), 1
		capped = func(n int) int { return min(n, pool.Positions()) }
	}
	largest, err := planner.Largest(policy, planSlots, lm.profile, cal, budget)
	if err != nil {
		return jobs.Capability{}, fmt.Errorf("capabilities: %w", err)
	}
	c := jobs.Capability{
		Version: jobs.CapabilityVersion, ID: fmt.Sprintf("%s:%d:%s", host, os.Getpid(), rand.Text()[:8]), Worker: name, Host: host, PID: os.Getpid(),
		Build: buildinfo.Get().Version,
		Model: lm.name, ModelKey: jobs.ModelKey(lm.name), ModelFile: filepath.Base(lm.path),
		ModelFingerprint: fmt.Sprintf("%d bytes, general.name %q", lm.m.File.Size(), lm.profile.Name),
		Architecture:     lm.profile.Architecture, Backend: lm.m.Backend.Name(),
		Device:      deviceName(),
		GPULimitMiB: budget.LimitMiB, MarginMiB: budget.MarginMiB, BudgetSource: string(budget.Source),
		Slots: slots, MaxContext: capped(largest.Context),
		Tokens: lm.tokenStats(),
	}
	if pool != nil {
		c.ExpertResidency, c.ExpertCacheMiB = string(pool.Residency), pool.ExpertCacheBytes/planner.MiB
	}
	for _, kv := range planner.KVPrecisions {
		if pool != nil && kv != pool.KV {
			continue // the pool has one precision
		}
		p := policy
		p.KV = planner.ForceKV(kv)
		l, err := planner.Largest(p, planSlots, lm.profile, cal, budget)
		if err != nil {
			continue // the policy forces the other precision
		}
		for _, mt := range capabilityProbeMaxTokens {
			c.Largest = append(c.Largest, jobs.LargestPrompt{KV: kv.String(), MaxTokens: mt, PromptTokens: max(capped(l.Context)-mt, 0)})
		}
	}
	for _, v := range []struct {
		dst *json.RawMessage
		src any
	}{{&c.Profile, lm.profile}, {&c.Calibration, cal}, {&c.Policy, policy}} {
		if *v.dst, err = json.Marshal(v.src); err != nil {
			return jobs.Capability{}, fmt.Errorf("capabilities: %w", err)
		}
	}
	return c, nil
}

// deviceName is the Metal device on a Mac ("Apple M4 Pro"), else the OS, architecture and
// CPU count.
func deviceName() string {
	if dev, err := metalkit.DefaultDevice(); err == nil && dev.Name != "" {
		return dev.Name
	}
	return fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
}

// tokenStats measures what a client needs to estimate prompt lengths (jobs.TokenStats).
func (lm *loadedModel) tokenStats() jobs.TokenStats {
	var s jobs.TokenStats
	var sample strings.Builder
	for _, m := range jobs.SummarizeMessages(&jobs.Summarize{Input: "Red Lite Batch turns a fleet of Apple Silicon Macs into a batch inference service for long documents."}) {
		sample.WriteString(m.Content)
	}
	if n := len(lm.tok.Encode(sample.String(), false)); n > 0 {
		s.BytesPerToken = float64(sample.Len()) / float64(n)
	}
	for id := range lm.tok.VocabSize() {
		s.MaxTokenBytes = max(s.MaxTokenBytes, len(lm.tok.Decode([]int32{int32(id)})))
	}
	if p, err := lm.encodeChat([]jobs.Message{{Role: jobs.RoleSystem}, {Role: jobs.RoleUser}}, false); err == nil {
		s.TemplateTokens = len(p.ids)
	}
	return s
}

// capabilities publishes the document until terminate.
type capabilities struct {
	rdb redis.UniversalClient
	ttl time.Duration
	log *slog.Logger
	mu  sync.Mutex
	doc jobs.Capability
	// prefixes are published with the document (affinity.go); nil when the worker publishes
	// none.
	prefixes *prefixLRU
	stop     chan struct{}
	done     chan struct{}
}

func newCapabilities(rdb redis.UniversalClient, doc jobs.Capability, ttl time.Duration, log *slog.Logger) (*capabilities, error) {
	doc.Started = time.Now().UTC()
	return &capabilities{rdb: rdb, ttl: ttl, log: log, doc: doc, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// publish writes the document with a fresh TTL: the index entry first, so that a reader
// that finds the entry without its key (not yet written, or expired) knows by the entry's
// expiry which it is.
func (c *capabilities) publish() error {
	c.mu.Lock()
	c.doc.Updated = time.Now().UTC()
	doc := c.doc
	c.mu.Unlock()
	if c.prefixes != nil {
		doc.Prefixes = c.prefixes.keys()
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(c.ttl/6, time.Second))
	defer cancel()
	_, err = c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, jobs.CapabilitiesIndex, redis.Z{Score: jobs.CapabilityScore(time.Now().Add(c.ttl)), Member: doc.ID})
		p.Set(ctx, jobs.CapabilityKey(doc.ID), b, c.ttl)
		return nil
	})
	return err
}

func (c *capabilities) start() {
	if err := c.publish(); err != nil {
		c.log.Warn("publish the worker's capabilities", "err", err)
	}
	go func() {
		defer close(c.done)
		tick := time.NewTicker(c.ttl / 6)
		defer tick.Stop()
		var changed chan struct{} // nil, never ready, without prefixes
		if c.prefixes != nil {
			changed = c.prefixes.changed
		}
		for {
			select {
			case <-c.stop:
				return
			case <-tick.C:
			case <-changed: // a job's prefix is new: clients may route the next ones here
			}
			if err := c.publish(); err != nil {
				c.log.Debug("publish the worker's capabilities", "err", err)
			}
		}
	}()
}

// drain marks the worker as shutting down: clients stop routing to it at once.
func (c *capabilities) drain() {
	c.mu.Lock()
	c.doc.Draining = true
	c.mu.Unlock()
	if err := c.publish(); err != nil {
		c.log.Debug("publish draining", "err", err)
	}
}

// terminate stops publishing and removes the document (a worker that dies lets it expire).
func (c *capabilities) terminate() {
	close(c.stop)
	<-c.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.rdb.ZRem(ctx, jobs.CapabilitiesIndex, c.doc.ID)
	c.rdb.Del(ctx, jobs.CapabilityKey(c.doc.ID))
}

// startCapabilities describes the worker, derives the routed queues it serves from
// REDLITE_QUEUES and the longest job it holds (jobs.WorkerQueues), and its own queues when it
// publishes prefixes (affinity.go), and starts publishing; it
// runs before the asynq server starts, so that the queues are in its configuration.
func (d *Daemon) startCapabilities(name string, lm *loadedModel, budget planner.Budget, cal planner.Calibration, policy planner.Policy, pool *planner.Pool) error {
	doc, err := capabilityOf(name, lm, budget, cal, policy, d.cfg.Concurrency, pool)
	if err != nil {
		return err
	}
	base := d.cfg.Queues
	d.cfg.Queues = jobs.WorkerQueues(base, doc.ModelKey, doc.MaxContext)
	if d.cfg.PrefixAffinity && prefixCacheOn(d.cfg, pool) {
		d.prefixes = newPrefixLRU(jobs.MaxPublishedPrefixes)
		maps.Copy(d.cfg.Queues, jobs.AffinityQueues(base, doc.ModelKey, name))
	}
	doc.Queues = d.cfg.Queues
	d.m.maxContext.WithLabelValues(doc.Model).Set(float64(doc.MaxContext))
	if d.cp, err = newCapabilities(d.rdb, doc, d.cfg.CapabilityTTL, d.log); err != nil {
		return err
	}
	d.cp.prefixes = d.prefixes
	d.cp.start()
	d.log.Info("capabilities published", "max_context", doc.MaxContext, "model_key", doc.ModelKey, "queues", len(doc.Queues))
	return nil
}
