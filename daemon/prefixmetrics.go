package daemon

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlite/batch/engine"
)

// prefixMetrics follow a batching worker's prefix cache (engine.PrefixStats): its counters
// advance by what changed since the last step, its gauges say what it holds.
type prefixMetrics struct {
	lookups, saved, evictions prometheus.Counter
	hits                      *prometheus.CounterVec // by source: memory, disk
	bytes                     *prometheus.GaugeVec   // by where: memory, disk, kv
	entries                   *prometheus.GaugeVec   // by where: memory, disk

	mu   sync.Mutex
	last engine.PrefixStats
}

func newPrefixMetrics(reg prometheus.Registerer) (*prefixMetrics, error) {
	p := &prefixMetrics{
		lookups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlite_prefix_cache_lookups_total", Help: "Jobs a batching worker admitted with its prefix cache on.",
		}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlite_prefix_cache_hits_total", Help: "Jobs that started from a cached prompt prefix, by where it was (memory, disk).",
		}, []string{"source"}),
		saved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlite_prefix_cache_tokens_saved_total", Help: "Prompt tokens taken from the prefix cache instead of prefilled.",
		}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlite_prefix_cache_evictions_total", Help: "Cached prefixes dropped from memory (spilled to REDLITE_PREFIX_CACHE_DIR when set).",
		}),
		bytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redlite_prefix_cache_bytes", Help: "What the prefix cache holds: memory (recurrent checkpoints, bounded by REDLITE_PREFIX_CACHE_MIB), disk (bounded by REDLITE_PREFIX_CACHE_DISK_MIB), kv (blocks of the KV pool it keeps, given back when jobs need them).",
		}, []string{"where"}),
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redlite_prefix_cache_entries", Help: "Prefixes the prefix cache holds, by where (memory, disk).",
		}, []string{"where"}),
	}
	for _, c := range []prometheus.Collector{p.lookups, p.hits, p.saved, p.evictions, p.bytes, p.entries} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, s := range []string{"memory", "disk"} {
		p.hits.WithLabelValues(s)
		p.entries.WithLabelValues(s)
	}
	return p, nil
}

// observe brings the metrics to s; blockBytes is one KV block's bytes.
func (p *prefixMetrics) observe(s engine.PrefixStats, blockBytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.last
	p.lookups.Add(float64(s.Lookups - l.Lookups))
	p.hits.WithLabelValues("memory").Add(float64((s.Hits - s.DiskHits) - (l.Hits - l.DiskHits)))
	p.hits.WithLabelValues("disk").Add(float64(s.DiskHits - l.DiskHits))
	p.saved.Add(float64(s.TokensSaved - l.TokensSaved))
	p.evictions.Add(float64(s.Evictions - l.Evictions))
	p.bytes.WithLabelValues("memory").Set(float64(s.Bytes))
	p.bytes.WithLabelValues("disk").Set(float64(s.DiskBytes))
	p.bytes.WithLabelValues("kv").Set(float64(int64(s.KVBlocks) * blockBytes))
	p.entries.WithLabelValues("memory").Set(float64(s.Entries))
	p.entries.WithLabelValues("disk").Set(float64(s.DiskEntries))
	p.last = s
}
