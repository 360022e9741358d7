package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batch statuses, as OpenAI names them.
const (
	statusValidating = "validating"
	statusFailed     = "failed"
	statusInProgress = "in_progress"
	statusFinalizing = "finalizing"
	statusCompleted  = "completed"
	statusExpired    = "expired"
	statusCancelling = "cancelling"
	statusCancelled  = "cancelled"
)

const (
	chatEndpoint        = "/v1/chat/completions"
	completionsEndpoint = "/v1/completions"
	responsesEndpoint   = "/v1/responses"
	batchWindow         = 24 * time.Hour
	maxMetadataKeys     = 16
)

// Batch is OpenAI's batch object.
type Batch struct {
	ID          string       `json:"id"`
	Object      string       `json:"object"` // "batch"
	Endpoint    string       `json:"endpoint"`
	Model       *string      `json:"model"` // the first line's model; null when no line names one
	Errors      *BatchErrors `json:"errors"`
	InputFileID string       `json:"input_file_id"`
	// Fields not set yet are null, as OpenAI's are, not left out.
	CompletionWindow string             `json:"completion_window"`
	Status           string             `json:"status"`
	OutputFileID     *string            `json:"output_file_id"`
	ErrorFileID      *string            `json:"error_file_id"`
	CreatedAt        int64              `json:"created_at"`
	InProgressAt     *int64             `json:"in_progress_at"`
	ExpiresAt        int64              `json:"expires_at"`
	FinalizingAt     *int64             `json:"finalizing_at"`
	CompletedAt      *int64             `json:"completed_at"`
	FailedAt         *int64             `json:"failed_at"`
	ExpiredAt        *int64             `json:"expired_at"`
	CancellingAt     *int64             `json:"cancelling_at"`
	CancelledAt      *int64             `json:"cancelled_at"`
	RequestCounts    BatchRequestCounts `json:"request_counts"`
	Usage            *BatchUsage        `json:"usage"` // tokens of the lines finished so far
	Metadata         map[string]string  `json:"metadata"`
}

// BatchUsage sums the tokens of a batch's completed lines, in OpenAI's names.
type BatchUsage struct {
	InputTokens        int               `json:"input_tokens"`
	OutputTokens       int               `json:"output_tokens"`
	TotalTokens        int               `json:"total_tokens"`
	InputTokensDetails InputTokenDetails `json:"input_tokens_details"`
}

// InputTokenDetails is OpenAI's input_tokens_details: the input tokens that came from the
// workers' prefix caches.
type InputTokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// unixNow is the time now in Unix seconds, for a batch's timestamps.
func unixNow() *int64 {
	t := time.Now().Unix()
	return &t
}

// BatchErrors lists what is wrong with a failed batch's input file.
type BatchErrors struct {
	Object string       `json:"object"` // "list"
	Data   []BatchError `json:"data"`
}

// BatchRequestCounts counts a batch's requests.
type BatchRequestCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

// batchState is what Redis keeps of a batch: the public object and the runner's place.
type batchState struct {
	Batch
	Owner string `json:"owner"`
	// Validated is set once the input file has been read into the per-line hashes.
	Validated bool `json:"validated"`
	// Next is the first line (0-based) not yet enqueued.
	Next int `json:"next"`
	// Stop is the final status a stopping batch ends in: cancelled or expired.
	Stop string `json:"stop,omitempty"`
	// Cursor is where the next step's scan of the pending lines starts.
	Cursor uint64 `json:"cursor,omitempty"`
}

func (b *batchState) final() bool {
	switch b.Status {
	case statusCompleted, statusFailed, statusExpired, statusCancelled:
		return true
	}
	return false
}

// BatchRequest is the body of POST /v1/batches.
type BatchRequest struct {
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
}

func (s *Server) postBatch(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	var req BatchRequest
	if err := decodeStrictJSON(body, &req); err != nil {
		return err
	}
	switch {
	case req.InputFileID == "":
		return badRequest("input_file_id", "input_file_id is required")
	case textRouteFor(req.Endpoint) == nil:
		return badRequest("endpoint", "endpoint must be %q, %q or %q, got %q", chatEndpoint, completionsEndpoint, responsesEndpoint, clip(req.Endpoint))
	case req.CompletionWindow != "24h":
		return badRequest("completion_window", `completion_window must be "24h", got %q`, clip(req.CompletionWindow))
	case len(req.Metadata) > maxMetadataKeys:
		return badRequest("metadata", "metadata has %d keys, at most %d are allowed", len(req.Metadata), maxMetadataKeys)
	}
	for k, v := range req.Metadata {
		if len(k) > 64 || len(v) > 512 {
			return badRequest("metadata", "metadata keys must be at most 64 bytes and values at most 512, %q is not", clip(k))
		}
	}
	who := caller(r)
	f, err := s.loadFile(r.Context(), who, req.InputFileID)
	if err != nil {
		return err
	}
	if f.Purpose != purposeBatch {
		return badRequest("input_file_id", "file %s has purpose %q, want %q", f.ID, f.Purpose, purposeBatch)
	}
	now := time.Now()
	b := batchState{Batch: Batch{ID: newID("batch_"), Object: "batch", Endpoint: req.Endpoint, InputFileID: f.ID,
		CompletionWindow: req.CompletionWindow, Status: statusValidating, CreatedAt: now.Unix(),
		ExpiresAt: now.Add(batchWindow).Unix(), Metadata: req.Metadata}, Owner: who}
	if b.Metadata == nil {
		b.Metadata = map[string]string{}
	}
	data, _ := json.Marshal(b)
	ctx := r.Context()
	if err := s.reserveBatch(ctx, who, b.ID); err != nil {
		return err
	}
	err = s.tx(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, keyBatch(b.ID), data, 0)
		p.ZAdd(ctx, keyBatches(who), redis.Z{Score: float64(now.UnixMicro()), Member: b.ID})
		p.SAdd(ctx, keyBatchesOpen, b.ID)
		return nil
	})
	if err != nil {
		if rerr := s.rdb.SRem(context.WithoutCancel(ctx), keyQueuedBatches(who), b.ID).Err(); rerr != nil {
			s.log.Warn("release the place of a batch not stored", "batch", b.ID, "err", rerr)
		}
		return serverError(fmt.Errorf("store batch: %w", err))
	}
	s.batches.kick()
	writeJSON(w, http.StatusOK, b.Batch)
	return nil
}

// decodeStrictJSON decodes one JSON object into v, refusing unknown fields by name.
func decodeStrictJSON(body []byte, v any) error {
	if err := decodeJSON(body, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// encoding/json names the field only in its message: json: unknown field "x".
		if _, name, ok := strings.Cut(err.Error(), "unknown field "); ok {
			name, _ = strconv.Unquote(name)
			return badRequest(name, "unknown parameter %q", clip(name))
		}
		return badRequest("", "request body: %v", err)
	}
	return nil
}

func (s *Server) loadBatch(ctx context.Context, id string) (*batchState, error) {
	data, err := s.rdb.Get(ctx, keyBatch(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, notFound("batch", id)
	}
	if err != nil {
		return nil, serverError(fmt.Errorf("read batch %s: %w", id, err))
	}
	var b batchState
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, serverError(fmt.Errorf("batch %s: %w", id, err))
	}
	return &b, nil
}

// batchView is the batch as a client sees it: a cancel the runner has not yet taken up
// already shows as cancelling.
func (s *Server) batchView(ctx context.Context, who, id string) (*batchState, error) {
	b, err := s.loadBatch(ctx, id)
	if err != nil {
		return nil, err
	}
	if b.Owner != who {
		return nil, notFound("batch", id)
	}
	if !b.final() && b.Stop == "" {
		if at, err := s.rdb.Get(ctx, keyBatchCancel(id)).Int64(); err == nil {
			b.Status, b.CancellingAt = statusCancelling, &at
		}
	}
	return b, nil
}

func (s *Server) getBatch(w http.ResponseWriter, r *http.Request) error {
	b, err := s.batchView(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b.Batch)
	return nil
}

func (s *Server) listBatches(w http.ResponseWriter, r *http.Request) error {
	who := caller(r)
	ids, more, err := s.pageIDs(r, keyBatches(who))
	if err != nil {
		return err
	}
	out := page[Batch]{Object: "list", Data: []Batch{}, HasMore: more}
	for _, id := range ids {
		if b, err := s.batchView(r.Context(), who, id); err == nil {
			out.Data = append(out.Data, b.Batch)
		}
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = out.Data[0].ID, out.Data[n-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// cancelBatch records the request in its own key rather than in the batch: the runner of
// whichever instance holds the batch's lock takes it up, so the two never overwrite each
// other's writes.
func (s *Server) cancelBatch(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	b, err := s.batchView(ctx, caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	if b.final() {
		return conflict("batch_finished", "batch %s is %s and cannot be cancelled", b.ID, b.Status)
	}
	if b.Status != statusCancelling {
		now := time.Now().Unix()
		if err := s.rdb.SetNX(ctx, keyBatchCancel(b.ID), now, 0).Err(); err != nil {
			return serverError(fmt.Errorf("cancel batch %s: %w", b.ID, err))
		}
		if b, err = s.batchView(ctx, caller(r), b.ID); err != nil {
			return err
		}
		s.batches.kick()
	}
	writeJSON(w, http.StatusOK, b.Batch)
	return nil
}

// batchReq is what the runner keeps of one input line.
type batchReq struct {
	CustomID string `json:"custom_id"`
}

// BatchOutputLine is one line of a batch's output or error file.
type BatchOutputLine struct {
	ID       string          `json:"id"`
	CustomID string          `json:"custom_id"`
	Response *BatchResponse  `json:"response"`
	Error    *BatchLineError `json:"error"`
}

// BatchResponse is the HTTP response a request would have had.
type BatchResponse struct {
	StatusCode int    `json:"status_code"`
	RequestID  string `json:"request_id"`
	Body       any    `json:"body"`
}

// BatchLineError is a request that got no response (cancelled, expired, lost).
type BatchLineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func batchJobID(batchID string, line int) string { return batchID + ":" + strconv.Itoa(line) }

// errorResponse is a line's response for a request refused or failed.
func errorResponse(id, customID string, err error) BatchOutputLine {
	e := asAPIError(err)
	body := errorBody{Error: Error{Message: e.msg, Type: e.typ}}
	if e.param != "" {
		body.Error.Param = &e.param
	}
	if e.code != "" {
		body.Error.Code = &e.code
	}
	return BatchOutputLine{ID: "batch_req_" + id, CustomID: customID,
		Response: &BatchResponse{StatusCode: e.status, RequestID: id, Body: body}}
}
