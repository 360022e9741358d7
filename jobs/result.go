package jobs

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// FinishReason says why generation stopped.
type FinishReason string

const (
	FinishStop      FinishReason = "stop"      // end-of-sequence token or a stop string
	FinishLength    FinishReason = "length"    // max_tokens reached
	FinishCancelled FinishReason = "cancelled" // cancelled, deadline or timeout
)

// Result is what a finished job returns.
type Result struct {
	Version int    `json:"version"`
	Text    string `json:"text"`
	// Reasoning is a thinking model's reasoning (its <think> block), kept out of Text.
	Reasoning    string          `json:"reasoning,omitempty"`
	FinishReason FinishReason    `json:"finish_reason"`
	Usage        Usage           `json:"usage"`
	Timings      Timings         `json:"timings"`
	Plan         Plan            `json:"plan"`
	Model        string          `json:"model"`
	Worker       string          `json:"worker"`
	Metadata     json.RawMessage `json:"metadata,omitempty"` // the payload's, unchanged
	// Strategy is how a summary was made: single or hierarchical (absent for generate).
	Strategy Strategy `json:"strategy,omitempty"`
	// Tree, Pieces and Workers describe a hierarchical summary: its levels, the byte spans
	// of the document's pieces (level 0), and every worker that ran a piece. Usage and
	// timings are then summed over every child job; Plan, Model and Worker are the final
	// level's.
	Tree    *Tree    `json:"tree,omitempty"`
	Pieces  []Span   `json:"pieces,omitempty"`
	Workers []string `json:"workers,omitempty"`
	// Logprobs, when the payload asked for them, has one entry per generated token.
	Logprobs *Logprobs `json:"logprobs,omitempty"`
	// Choices, for a payload with n > 1, are the n completions in order; the first is also
	// Text, Reasoning, FinishReason and Logprobs above. Usage counts the prompt once and the
	// completion tokens of every choice. Absent for n 1.
	Choices []Choice `json:"choices,omitempty"`
}

// Choice is one of a result's n completions.
type Choice struct {
	Index            int          `json:"index"`
	Text             string       `json:"text"`
	Reasoning        string       `json:"reasoning,omitempty"`
	FinishReason     FinishReason `json:"finish_reason"`
	CompletionTokens int          `json:"completion_tokens"`
	Logprobs         *Logprobs    `json:"logprobs,omitempty"`
}

// All returns the result's completions: Choices, or the result's own text as the only one.
func (r Result) All() []Choice {
	if len(r.Choices) > 0 {
		return r.Choices
	}
	return []Choice{{Text: r.Text, Reasoning: r.Reasoning, FinishReason: r.FinishReason,
		CompletionTokens: r.Usage.CompletionTokens, Logprobs: r.Logprobs}}
}

// Logprobs is OpenAI's choice logprobs object.
type Logprobs struct {
	Content []TokenLogprob `json:"content"`
}

// TokenLogprob is one generated token: its text, log-probability, bytes (exact where the
// text, split inside a character, shows U+FFFD) and the most likely alternatives.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one alternative of a TokenLogprob.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// CachedTokens of the prompt tokens came from the worker's prefix cache instead of being
	// computed (OpenAI's usage.prompt_tokens_details.cached_tokens); absent when none did.
	CachedTokens int `json:"cached_tokens,omitempty"`
}

// Timings are wall-clock measurements of one job, in milliseconds and tokens per second.
type Timings struct {
	QueueWaitMS            float64 `json:"queue_wait_ms"` // enqueue to start of the attempt that finished
	PrefillMS              float64 `json:"prefill_ms"`
	PrefillTokensPerSecond float64 `json:"prefill_tokens_per_second"`
	DecodeMS               float64 `json:"decode_ms"`
	DecodeTokensPerSecond  float64 `json:"decode_tokens_per_second"`
	TotalMS                float64 `json:"total_ms"` // start of the attempt to the result
}

// Plan is the memory plan a job ran with, as plain data: jobs does not import the planner.
// New fields may be added within version 1; clients must ignore fields they do not know.
type Plan struct {
	Context         int    `json:"context"`          // tokens the session can hold
	Chunk           int    `json:"chunk"`            // prefill chunk, tokens
	KVPrecision     string `json:"kv_precision"`     // "f32", "f16" or "q8_0"
	ExpertResidency string `json:"expert_residency"` // "full" or "cache" (routed experts in a bounded cache)
	ExpertCacheMiB  int    `json:"expert_cache_mib"`
	MTP             bool   `json:"mtp"` // multi-token prediction
	Slots           int    `json:"slots"`
	// BlockSize and PoolBlocks describe the KV pool a batching worker (slots > 1) runs its
	// jobs in: blocks of block_size positions shared by the slots. 0 when the job ran alone.
	BlockSize  int `json:"block_size,omitempty"`
	PoolBlocks int `json:"pool_blocks,omitempty"`
	// Batch is the most sequences that ran in one step with this job.
	Batch    int `json:"batch,omitempty"`
	NeedMiB  int `json:"need_mib"`  // planned GPU memory
	LimitMiB int `json:"limit_mib"` // the device's limit
	// Backend is the engine backend the job ran on: cpu, metal or metal-harness.
	Backend string `json:"backend,omitempty"`
}

// Phase is where a running job is.
type Phase string

const (
	PhaseQueued     Phase = "queued"
	PhaseTokenizing Phase = "tokenizing"
	PhasePlanning   Phase = "planning"
	PhasePrefill    Phase = "prefill"
	PhaseDecode     Phase = "decode"
	PhaseDone       Phase = "done"
	// A hierarchical summary's parent waits for its children: the map over the document's
	// pieces, then the reduce levels.
	PhaseMap    Phase = "map"
	PhaseReduce Phase = "reduce"
)

// Progress is published by the worker while a job runs.
type Progress struct {
	Phase        Phase     `json:"phase"`
	PromptTokens int       `json:"prompt_tokens"` // 0 until tokenized
	Prefilled    int       `json:"prefilled"`     // prompt tokens processed so far
	Generated    int       `json:"generated"`     // tokens generated so far
	MaxTokens    int       `json:"max_tokens"`
	UpdatedAt    time.Time `json:"updated_at"`
	// Level, PiecesDone and PiecesTotal follow a hierarchical summary's parent: the level it
	// waits for (0 the map) and how many of its child jobs are done.
	Level       int `json:"level,omitempty"`
	PiecesDone  int `json:"pieces_done,omitempty"`
	PiecesTotal int `json:"pieces_total,omitempty"`
	// Text is the end of the answer generated so far, at most ProgressTextMax bytes and never
	// starting inside a UTF-8 character; TextOffset is the byte offset of its first byte in
	// the whole answer, so TextOffset+len(Text) is its length so far. Only released text is
	// here: an incomplete character or a possible stop string is held back. A thinking
	// model's reasoning goes to Reasoning and ReasoningOffset the same way, so that both
	// grow into the result's Text and Reasoning.
	Text            string `json:"text,omitempty"`
	TextOffset      int    `json:"text_offset,omitempty"`
	Reasoning       string `json:"reasoning,omitempty"`
	ReasoningOffset int    `json:"reasoning_offset,omitempty"`
}

// WithoutText is the progress without its text: counts and phase only, for listings and
// for readers that take the text apart (TextAfter).
func (p Progress) WithoutText() Progress {
	p.Text, p.TextOffset, p.Reasoning, p.ReasoningOffset = "", 0, "", 0
	return p
}

// ProgressTextMax bounds Progress.Text and Progress.Reasoning each: the progress is
// rewritten into Redis several times a second, so its size, not the output's, sets the
// cost of a write.
const ProgressTextMax = 64 << 10

// AppendText adds answer and reasoning text to what the progress shows.
func (p *Progress) AppendText(answer, reasoning string) {
	appendBounded(&p.Text, &p.TextOffset, answer)
	appendBounded(&p.Reasoning, &p.ReasoningOffset, reasoning)
}

// appendBounded adds s to *text, dropping the oldest bytes beyond ProgressTextMax (whole
// characters, so the text always starts on one) and counting them in *offset.
func appendBounded(text *string, offset *int, s string) {
	if s == "" {
		return
	}
	*text += s
	if over := len(*text) - ProgressTextMax; over > 0 {
		for over < len(*text) && !utf8.RuneStart((*text)[over]) {
			over++
		}
		*text = strings.Clone((*text)[over:]) // not a slice that pins the dropped bytes
		*offset += over
	}
}

// TextAfter returns the answer after its first n bytes, as far as the progress has it, and
// the new length. A reader that fell more than ProgressTextMax behind gets the text from
// TextOffset on and gap true: the bytes between were dropped.
func (p Progress) TextAfter(n int) (delta string, next int, gap bool) {
	return after(p.Text, p.TextOffset, n)
}

// ReasoningAfter is TextAfter for the reasoning.
func (p Progress) ReasoningAfter(n int) (delta string, next int, gap bool) {
	return after(p.Reasoning, p.ReasoningOffset, n)
}

func after(text string, offset, n int) (delta string, next int, gap bool) {
	end := offset + len(text)
	switch {
	case n >= end:
		return "", max(n, end), false
	case n < offset:
		return text, end, true
	}
	return text[n-offset:], end, false
}

// State is asynq's task state, by asynq's names (the ones asynqmon shows).
type State string

const (
	StatePending     State = "pending"
	StateScheduled   State = "scheduled"
	StateActive      State = "active"
	StateRetry       State = "retry" // failed, will run again
	StateArchived    State = "archived"
	StateCompleted   State = "completed"
	StateAggregating State = "aggregating"
)

// Done reports whether the job will not run again.
func (s State) Done() bool { return s == StateCompleted || s == StateArchived }

// Envelope is the one document a worker keeps in the task's result field (asynq's
// ResultWriter): progress while the job runs, then the result. Type tells them apart.
type Envelope struct {
	Type     EnvelopeType `json:"type"`
	Version  int          `json:"version"`
	Progress *Progress    `json:"progress,omitempty"`
	Result   *Result      `json:"result,omitempty"`
}

// EnvelopeType is "progress" or "result".
type EnvelopeType string

const (
	EnvelopeProgress EnvelopeType = "progress"
	EnvelopeResult   EnvelopeType = "result"
)

// EncodeProgress returns the envelope for p.
func EncodeProgress(p Progress) []byte {
	b, err := json.Marshal(Envelope{Type: EnvelopeProgress, Version: Version, Progress: &p})
	if err != nil {
		panic(fmt.Sprintf("jobs: encode progress: %v", err)) // plain data cannot fail
	}
	return b
}

// EncodeResult returns the envelope for r, setting a zero Version to the current one.
func EncodeResult(r Result) ([]byte, error) {
	if r.Version == 0 {
		r.Version = Version
	}
	b, err := json.Marshal(Envelope{Type: EnvelopeResult, Version: Version, Result: &r})
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err) // only invalid Metadata can do this
	}
	return b, nil
}

// DecodeEnvelope reads what a worker wrote. Unknown fields are ignored, so that workers may
// add fields within a version; an unknown type or version is an error.
func DecodeEnvelope(data []byte) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(data, &e); err != nil {
		return Envelope{}, fmt.Errorf("decode job envelope: %w", err)
	}
	if e.Version != Version {
		return Envelope{}, fmt.Errorf("decode job envelope: version must be %d, got %d", Version, e.Version)
	}
	switch {
	case e.Type == EnvelopeProgress && e.Progress != nil && e.Result == nil:
	case e.Type == EnvelopeResult && e.Result != nil && e.Progress == nil:
	default:
		return Envelope{}, fmt.Errorf("decode job envelope: type %q must come with exactly its own field (progress or result)", e.Type)
	}
	return e, nil
}
