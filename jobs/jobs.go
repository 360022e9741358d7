// Package jobs is the contract between Red Lite Batch and its clients: task type names, queue
// names and priorities, the versioned JSON payloads and their validation, the result and
// progress documents, their JSON Schemas, and a Go client over asynq.
//
// It is a leaf: it imports neither the engine, the daemon nor the planner, so that both sides
// of the queue can depend on it. README.md in this directory is the contract for client
// authors in any language.
package jobs

import "time"

// Task type names, as stored in asynq's task message. They carry no version: the payload
// does ("version": 1), so a raw client writes the same plain name for every version.
const (
	TypeSummarize = "summarize"
	TypeGenerate  = "generate"
)

// Version is the payload, result and progress document version this package reads and writes.
const Version = 1

// HeaderEnqueuedAt is the task header that carries when a job was enqueued (Unix nanoseconds,
// or RFC 3339), from which the worker reports the queue wait. asynq forgets a task's enqueue
// time once it starts; clients that set no header get queue_wait_ms 0.
const HeaderEnqueuedAt = "enqueued_at"

// Priority is a payload's "priority": which queue the job waits in.
type Priority string

const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal" // the default
	PriorityLow    Priority = "low"
)

// Queue names. A worker serves them with the weights in QueueWeights: asynq picks the next
// queue at random in proportion to its weight, so low-priority work is slowed, never starved.
const (
	QueueCritical = "critical"
	QueueDefault  = "default"
	QueueLow      = "low"
)

// QueueWeights returns the queue weights a worker should use (asynq.Config.Queues).
func QueueWeights() map[string]int {
	return map[string]int{QueueCritical: 6, QueueDefault: 3, QueueLow: 1}
}

// QueueNames lists the priority queues, highest priority first (routed queues are named
// after them: BucketQueue).
func QueueNames() []string { return []string{QueueCritical, QueueDefault, QueueLow} }

// QueueFor maps a priority to its queue; the empty priority is normal.
func QueueFor(p Priority) string {
	switch p {
	case PriorityHigh:
		return QueueCritical
	case PriorityLow:
		return QueueLow
	}
	return QueueDefault
}

// Defaults applied when a payload leaves a field out. They are part of the contract
// (README.md) and of the JSON Schemas ("default").
const (
	DefaultGenerateMaxTokens  = 512
	DefaultSummarizeMaxTokens = 1024
	// Sampling defaults are Qwen3's recommended non-thinking settings.
	DefaultTemperature = 0.7
	DefaultTopP        = 0.8
	DefaultTopK        = 20
	DefaultMinP        = 0.0
	// DefaultTimeout bounds a job that sets neither timeout nor deadline: long enough for a
	// long document's prefill on a small Mac, short enough that a stuck job is noticed.
	DefaultTimeout = time.Hour
	// DefaultRetention is how long a finished job's result stays readable in Redis.
	DefaultRetention = 24 * time.Hour
	// DefaultMaxRetry is how often an engine fault is retried. asynq's own default (25) is
	// meant for short jobs; ours may run for many minutes.
	DefaultMaxRetry = 3
)

// Limits checked by Validate. Each error message names the field and the limit.
const (
	MaxMaxTokens = 32768
	// MaxInputBytes bounds a summarize input and the total text of a generate request
	// (prompt, or all message contents). 2 MiB of text is ~500K tokens, more than the
	// largest plan can hold; the planner gives the exact answer for each Mac.
	MaxInputBytes = 2 << 20
	// MaxPayloadBytes bounds the encoded payload: four times MaxInputBytes leaves room for
	// JSON escaping of ordinary text (a newline or a quote takes two bytes).
	MaxPayloadBytes = 8 << 20
	MaxMessages     = 1024
	MaxStop         = 16
	MaxStopBytes    = 256
	MaxTemperature  = 2.0
	MaxTopK         = 1000
	// MaxSeed is the largest integer a JSON number holds exactly in every language (2^53-1).
	MaxSeed              = 1<<53 - 1
	MaxModelBytes        = 256
	MaxIdempotencyKeyLen = 128
	MaxMetadataBytes     = 16 << 10
	// MaxMetadataDepth bounds how deeply metadata nests (objects and arrays): metadata is
	// echoed back in results, and a reader with a recursive JSON parser (Python's json
	// stops near 1,000 levels) must be able to read every result.
	MaxMetadataDepth     = 32
	MaxWebhookURLBytes   = 2048
	MaxTimeoutSeconds    = 7 * 24 * 3600
	MaxInstructionLength = 200
	MaxInstructionLang   = 64
	MaxInstructionFocus  = 2000
)
