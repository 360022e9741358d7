package daemon

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/planner"
)

// Job outcomes, the "outcome" label of redlite_jobs_total and redlite_job_duration_seconds.
const (
	outcomeCompleted  = "completed"    // result written
	outcomeCancelled  = "cancelled"    // cancel, deadline or timeout; partial result written
	outcomeInvalid    = "invalid"      // bad payload or a model this worker does not serve: archived
	outcomeDoesNotFit = "does_not_fit" // no plan fits: archived with the planner's explanation
	outcomeFault      = "engine_fault" // retried with back-off
	outcomeRequeued   = "requeued"     // shutdown took the job back to its queue
	outcomeOrphaned   = "orphaned"     // taken for dead, the job ran again elsewhere
	outcomeBusy       = "busy"         // waited REDLITE_ADMISSION_TIMEOUT unrun: retried
	outcomeWaiting    = "waiting"      // a hierarchical summary's parent checked its children
	outcomeFailed     = "failed"       // a hierarchical summary's child failed for good: archived
)

// metrics are the daemon's Prometheus metrics, registered on an injected registry. Names end
// in their unit, as Prometheus's naming guide asks.
type metrics struct {
	jobs           *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	queueWait      *prometheus.HistogramVec
	promptTokens   *prometheus.CounterVec
	genTokens      *prometheus.CounterVec
	prefillRate    *prometheus.HistogramVec
	decodeRate     *prometheus.HistogramVec
	phase          *prometheus.GaugeVec
	modelLoad      prometheus.Gauge
	modelInfo      *prometheus.GaugeVec
	buildInfo      *prometheus.GaugeVec
	wiredLimit     prometheus.Gauge
	plans          *prometheus.CounterVec
	plannedBytes   prometheus.Gauge
	limitBytes     prometheus.Gauge
	planNeedBytes  prometheus.Histogram
	webhooks       *prometheus.CounterVec
	progressWrites *prometheus.CounterVec
	textWrites     *prometheus.CounterVec
	textEntries    prometheus.Counter
	expertLookups  *prometheus.CounterVec
	rerouted       *prometheus.CounterVec
	affinityJobs   prometheus.Counter
	maxContext     *prometheus.GaugeVec
	// Continuous batching (REDLITE_CONCURRENCY > 1).
	batchSize     prometheus.Histogram
	stepSeconds   prometheus.Histogram
	kvBlocks      *prometheus.GaugeVec
	admissionWait prometheus.Histogram
	prefix        *prefixMetrics
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	// Jobs last from a second (a short generate on a small model) to hours (a long document
	// on a small Mac).
	durations := []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200}
	rates := prometheus.ExponentialBuckets(1, 2, 18) // 1 … 131,072 tokens/s
	m := &metrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlite_jobs_total", Help: "Job attempts finished, by task type and outcome (completed, cancelled, invalid, does_not_fit, rerouted, engine_fault, requeued).",
		}, []string{"type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redlite_job_duration_seconds", Help: "Time from the start of an attempt to its end, by task type and outcome.", Buckets: durations,
		}, []string{"type", "outcome"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redlite_job_queue_wait_seconds", Help: "Time from enqueue to the start of the attempt, for jobs whose enqueue time is known (the enqueued_at task header).", Buckets: durations,
		}, []string{"type"}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlite_prompt_tokens_total", Help: "Prompt tokens prefilled, chat template included.",
		}, []string{"type"}),
		genTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlite_generated_tokens_total", Help: "Tokens generated.",
		}, []string{"type"}),
		prefillRate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redlite_prefill_tokens_per_second", Help: "Prefill speed of each job.", Buckets: rates,
		}, []string{"type"}),
		decodeRate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redlite_decode_tokens_per_second", Help: "Decode speed of each job.", Buckets: rates,
		}, []string{"type"}),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redlite_jobs_running", Help: "Jobs running now, by phase (tokenizing, planning, prefill, decode).",
		}, []string{"phase"}),
		modelLoad: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redlite_model_load_seconds", Help: "Time the model took to load.",
		}),
		modelInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redlite_model_info", Help: "The model this worker serves (always 1).",
		}, []string{"model", "architecture"}),
		wiredLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redlite_iogpu_wired_limit_bytes", Help: "macOS's iogpu.wired_limit_mb read at start, in bytes (0: the macOS default); exported only on macOS.",
		}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redlite_build_info", Help: "The build of redlited running (always 1): version, commit, Go version and engine backend.",
		}, []string{"version", "commit", "go_version", "backend"}),
		plans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlite_plans_total", Help: "Plans chosen, by KV precision, prefill chunk, MTP and expert residency.",
		}, []string{"kv_precision", "chunk", "mtp", "residency"}),
		plannedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redlite_planned_memory_bytes", Help: "Memory the running jobs' plans need (compare with redlite_memory_limit_bytes).",
		}),
		limitBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redlite_memory_limit_bytes", Help: "The memory limit plans must fit: the GPU limit less the margin.",
		}),
		planNeedBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "redlite_plan_need_bytes", Help: "Memory need of each chosen plan.", Buckets: prometheus.ExponentialBuckets(64<<20, 2, 12), // 64 MiB … 128 GiB
		}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlite_webhook_deliveries_total", Help: "Attempts to POST a result to webhook_url, by outcome (ok, error: retried, expired: given up after REDLITE_WEBHOOK_RETRY_FOR, refused: an address webhooks may not reach, see REDLITE_WEBHOOK_ALLOW).",
		}, []string{"outcome"}),
		progressWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlite_progress_writes_total", Help: "Progress envelopes written to Redis, by outcome (ok, error).",
		}, []string{"outcome"}),
		textWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlite_text_stream_writes_total", Help: "Round trips appending generated text to jobs' text streams, by outcome (ok, error); at most one per REDLITE_STREAM_INTERVAL per generating job.",
		}, []string{"outcome"}),
		textEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlite_text_stream_entries_total", Help: "Entries appended to jobs' text streams: one per token, or per REDLITE_STREAM_INTERVAL when tokens come faster.",
		}),
		expertLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlite_expert_cache_lookups_total", Help: "Routed-expert slices looked up in the bounded expert cache, by result (hit, miss); all hits when every expert is resident.",
		}, []string{"result"}),
		rerouted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlite_jobs_rerouted_total", Help: "Jobs this worker moved to the queue of workers that can run them, by reason: does_not_fit and model (it took them and could not run them), stranded (they waited in a queue no live worker serves), handed_over (they waited in its own queue when it shut down).",
		}, []string{"reason"}),
		affinityJobs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlite_affinity_jobs_total", Help: "Job attempts this worker took from its own queue, where clients routed them because it ran a prompt they start with (prefix affinity).",
		}),
		maxContext: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redlite_worker_max_context_tokens", Help: "The longest job (prompt + max_tokens per slot) this worker's planner takes, with its model: its top capacity bucket.",
		}, []string{"model"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "redlite_batch_sequences", Help: "Sequences in each forward step of the batch scheduler.",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16, 32, 64},
		}),
		stepSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "redlite_batch_step_seconds", Help: "Duration of each forward step of the batch scheduler.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16), // 1 ms … 33 s
		}),
		kvBlocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redlite_kv_blocks", Help: "Blocks of the batch scheduler's KV pool, by state (used, free).",
		}, []string{"state"}),
		admissionWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "redlite_admission_wait_seconds", Help: "Time a job waited in the worker for a batch slot and the KV blocks of its prompt + max_tokens.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12), // 1 ms … 70 min
		}),
	}
	for _, c := range []prometheus.Collector{m.maxContext, m.rerouted, m.affinityJobs, m.batchSize, m.stepSeconds, m.kvBlocks, m.admissionWait, m.jobs, m.duration, m.queueWait, m.promptTokens, m.genTokens,
		m.prefillRate, m.decodeRate, m.phase, m.modelLoad, m.modelInfo, m.buildInfo, m.plans, m.plannedBytes,
		m.limitBytes, m.planNeedBytes, m.webhooks, m.progressWrites, m.textWrites, m.textEntries, m.expertLookups} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	var err error
	if m.prefix, err = newPrefixMetrics(reg); err != nil {
		return nil, err
	}
	// Series exist from the start, so that a dashboard shows 0 rather than nothing.
	for _, typ := range []string{jobs.TypeSummarize, jobs.TypeGenerate} {
		m.queueWait.WithLabelValues(typ)
		m.promptTokens.WithLabelValues(typ)
		m.genTokens.WithLabelValues(typ)
	}
	m.rerouted.WithLabelValues("does_not_fit")
	m.rerouted.WithLabelValues("model")
	m.rerouted.WithLabelValues(outcomeHandedOver)
	m.expertLookups.WithLabelValues("hit")
	m.expertLookups.WithLabelValues("miss")
	for _, p := range []jobs.Phase{jobs.PhaseTokenizing, jobs.PhasePlanning, jobs.PhasePrefill, jobs.PhaseDecode} {
		m.phase.WithLabelValues(string(p))
	}
	return m, nil
}

func (m *metrics) plan(p planner.Plan) {
	m.plans.WithLabelValues(p.KV.String(), strconv.Itoa(p.Chunk), strconv.FormatBool(p.MTP), string(p.Residency)).Inc()
	m.planNeedBytes.Observe(float64(p.NeedMiB * planner.MiB))
}

// countExperts adds the expert cache lookups between two readings of the backend's counters.
func (m *metrics) countExperts(before, after ml.ExpertStats) {
	m.expertLookups.WithLabelValues("hit").Add(float64(max(after.Hits-before.Hits, 0)))
	m.expertLookups.WithLabelValues("miss").Add(float64(max(after.Misses-before.Misses, 0)))
}
