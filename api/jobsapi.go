package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/jobs"
)

// cancelTimeout bounds DELETE /v1/jobs/{id}: our worker lets go of a cancelled job within
// one prefill chunk or one token.
const cancelTimeout = 30 * time.Second

// ParseJobRequest reads a POST /v1/jobs body: "type" beside the fields of that type's
// payload, exactly as jobs/README defines them:
//
//	{"type": "generate", "version": 1, "messages": [...], "max_tokens": 64}
//
// idemHeader is the Idempotency-Key header; it sets the payload's idempotency_key and must
// agree with the field when both are given.
func ParseJobRequest(body []byte, idemHeader string) (jobs.Payload, error) {
	var doc map[string]json.RawMessage
	if err := decodeJSON(body, &doc); err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, badRequest("", "request body must be a JSON object, got null")
	}
	raw, ok := doc["type"]
	if !ok {
		return nil, badRequest("type", "type is required: %q or %q", jobs.TypeGenerate, jobs.TypeSummarize)
	}
	var typ string
	if err := json.Unmarshal(raw, &typ); err != nil {
		return nil, badRequest("type", "type must be a string, %q or %q", jobs.TypeGenerate, jobs.TypeSummarize)
	}
	delete(doc, "type")
	rest, err := json.Marshal(doc)
	if err != nil {
		return nil, badRequest("", "request body: %v", err)
	}
	p, err := jobs.Decode(typ, rest)
	if err != nil {
		return nil, err
	}
	if s, ok := p.(*jobs.Summarize); ok && s.Part != nil {
		return nil, badRequest("part", "is set by workers on the child jobs of a hierarchical summary, not by clients")
	}
	if idemHeader != "" {
		c := common(p)
		if c.IdempotencyKey != "" && c.IdempotencyKey != idemHeader {
			return nil, badRequest("idempotency_key", "the Idempotency-Key header %q and the idempotency_key field %q differ", clip(idemHeader), clip(c.IdempotencyKey))
		}
		c.IdempotencyKey = idemHeader
		if err := p.Validate(); err != nil {
			if ve := (*jobs.ValidationError)(nil); errors.As(err, &ve) && ve.Field == "idempotency_key" {
				return nil, badRequest("Idempotency-Key", "Idempotency-Key header: %s", ve.Msg)
			}
			return nil, err
		}
	}
	return p, nil
}

// common is the payload's shared fields, to change them.
func common(p jobs.Payload) *jobs.Common {
	switch p := p.(type) {
	case *jobs.Generate:
		return &p.Common
	case *jobs.Summarize:
		return &p.Common
	}
	panic(fmt.Sprintf("api: unknown payload type %T", p))
}

// decodeJSON decodes one JSON value and names the byte offset of a syntax error; anything
// after the value is an error.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "request body is empty; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return badRequest("", "request body is not valid JSON at byte offset %d: %v", max(se.Offset-1, 0), err)
		case errors.As(err, &te):
			if te.Field == "" {
				return badRequest("", "request body must be a JSON object, got %s", te.Value)
			}
			return badRequest(te.Field, "%s must not be a JSON %s", te.Field, te.Value)
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			return badRequest("", "request body is not valid JSON: unexpected end at byte offset %d", len(body))
		}
		return badRequest("", "request body: %v", err)
	}
	if dec.More() {
		return badRequest("", "request body must hold one JSON value; data follows it at byte offset %d", dec.InputOffset())
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// readBody reads at most limit bytes of the request body; beyond, a 413.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

// JobView is a job as the native API shows it.
type JobView struct {
	ID          string         `json:"id"`
	Object      string         `json:"object"` // "job"
	Type        string         `json:"type"`
	Queue       string         `json:"queue"`
	State       jobs.State     `json:"state"`
	Progress    *jobs.Progress `json:"progress"`
	Result      *jobs.Result   `json:"result"`
	LastError   string         `json:"last_error,omitempty"`
	Retried     int            `json:"retried"`
	MaxRetry    int            `json:"max_retry"`
	CompletedAt *time.Time     `json:"completed_at,omitempty"`
	// Duplicate is true when POST /v1/jobs found a job with the same idempotency key.
	Duplicate bool `json:"duplicate,omitempty"`
}

func viewOf(st jobs.Status) JobView {
	v := JobView{ID: st.ID, Object: "job", Type: st.Type, Queue: st.Queue, State: st.State, Result: st.Result,
		LastError: st.LastError, Retried: st.Retried, MaxRetry: st.MaxRetry}
	if st.State == jobs.StateActive || !st.State.Done() {
		// A retrying job's hash still holds its last attempt's progress; show what a
		// waiting client should see.
		p := jobs.Progress{Phase: jobs.PhaseQueued}
		if st.State == jobs.StateActive && st.Progress != nil {
			p = *st.Progress
		}
		v.Progress = &p
	}
	if !st.CompletedAt.IsZero() {
		t := st.CompletedAt
		v.CompletedAt = &t
	}
	return v
}

func (s *Server) postJob(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	p, err := ParseJobRequest(body, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	job, dup, err := s.submit(r.Context(), caller(r), p, "jobs")
	if err != nil {
		return err
	}
	if !dup {
		// A new job waits in its queue; asking Redis would cost a lookup per queue.
		writeJSON(w, http.StatusCreated, viewOf(jobs.Status{Job: job, State: jobs.StatePending, MaxRetry: jobs.DefaultMaxRetry}))
		return nil
	}
	st, err := s.client.Status(r.Context(), job.ID)
	if err != nil {
		return err
	}
	v := viewOf(st)
	v.Duplicate = true
	writeJSON(w, http.StatusOK, v)
	return nil
}

// submit enqueues p for the token who within its limit of queued jobs, its owner recorded
// first (owner.go); an idempotency key is taken in the token's namespace. dup reports an
// existing job with the same key.
func (s *Server) submit(ctx context.Context, who string, p jobs.Payload, source string) (job jobs.Job, dup bool, err error) {
	if err := s.checkQuota(ctx, who); err != nil {
		return jobs.Job{}, false, err
	}
	c := common(p)
	var opts []jobs.EnqueueOption
	id := newJobID()
	if c.IdempotencyKey != "" {
		c.IdempotencyKey = scopedKey(who, c.IdempotencyKey)
		id = c.IdempotencyKey
	} else {
		opts = append(opts, jobs.JobID(id))
	}
	created, err := s.claimOwner(ctx, who, id)
	if err != nil {
		return jobs.Job{}, false, err
	}
	hashed := false
	if c.IdempotencyKey != "" {
		if hashed, err = s.claimBody(ctx, id, p); err != nil {
			return jobs.Job{}, false, err
		}
	}
	job, err = s.client.Enqueue(ctx, p, opts...)
	if errors.Is(err, jobs.ErrDuplicate) && job.ID == id {
		return job, true, nil
	}
	if err != nil {
		if created {
			s.dropOwner(ctx, id)
		}
		if hashed {
			s.rdb.Del(context.WithoutCancel(ctx), keyIdemBody(id)) // best effort: the key is free again
		}
		return jobs.Job{}, false, err
	}
	s.m.enqueued.WithLabelValues(source).Inc()
	if err := s.rdb.SAdd(ctx, keyOpen(who), job.ID).Err(); err != nil {
		// The job is enqueued and owned; it only escapes the count of queued jobs.
		s.log.Warn("count a queued job", "job", job.ID, "err", err)
	}
	return job, false, nil
}

// claimBody records the hash of p under its idempotency key's job id (keyIdemBody), or
// compares it with the hash recorded: a key reused with another payload is refused with a
// 409 idempotency_conflict instead of answering with the first job, as Stripe does. The
// payload is hashed as encoded (jobs.EncodePayload), so JSON spacing and field order do not
// count. created reports a new record, which the caller drops if the enqueue fails.
func (s *Server) claimBody(ctx context.Context, id string, p jobs.Payload) (created bool, err error) {
	data, err := jobs.EncodePayload(p)
	if err != nil {
		return false, err
	}
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	created, err = s.rdb.SetNX(ctx, keyIdemBody(id), h, ownerTTL).Result()
	if err != nil {
		return false, serverError(fmt.Errorf("record the idempotency key of job %s: %w", id, err))
	}
	if created {
		return true, nil
	}
	old, err := s.rdb.Get(ctx, keyIdemBody(id)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, serverError(fmt.Errorf("read the idempotency key of job %s: %w", id, err))
	}
	if err == nil && old != h {
		return false, conflict("idempotency_conflict", "the idempotency key of job %s was used with another request body; "+
			"send the same body to get that job, or use a new key", id)
	}
	return false, nil
}

// checkQuota refuses a job when the token has REDLITE_API_MAX_QUEUED_JOBS unfinished ones.
// Finished jobs leave the count lazily, when the limit is reached.
func (s *Server) checkQuota(ctx context.Context, who string) error {
	max := int64(s.cfg.MaxQueuedJobs)
	if max == 0 {
		return nil
	}
	n, err := s.rdb.SCard(ctx, keyOpen(who)).Result()
	if err != nil {
		return serverError(fmt.Errorf("count queued jobs: %w", err))
	}
	if n < max {
		return nil
	}
	ids, err := s.rdb.SMembers(ctx, keyOpen(who)).Result()
	if err != nil {
		return serverError(fmt.Errorf("count queued jobs: %w", err))
	}
	for _, id := range ids {
		st, err := s.client.Status(ctx, id)
		if errors.Is(err, jobs.ErrNotFound) || (err == nil && st.State.Done()) {
			s.rdb.SRem(ctx, keyOpen(who), id)
			n--
		}
	}
	if n >= max {
		s.m.limited.WithLabelValues("queued_jobs").Inc()
		return &apiError{status: http.StatusTooManyRequests, typ: typeRate, code: "too_many_queued_jobs", retryAfter: 10 * time.Second,
			msg: fmt.Sprintf("this token has %d unfinished jobs, the limit (REDLITE_API_MAX_QUEUED_JOBS) is %d; wait for some to finish", n, max)}
	}
	return nil
}

// status is a job's status after the owner check.
func (s *Server) status(r *http.Request) (jobs.Status, error) {
	id := r.PathValue("id")
	if err := s.checkOwner(r.Context(), caller(r), id); err != nil {
		return jobs.Status{}, err
	}
	st, err := s.client.Status(r.Context(), id)
	return st, statusNotFound(id, err)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) error {
	st, err := s.status(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewOf(st))
	return nil
}

// parseWait reads ?wait= as a Go duration (30s, 2m) or whole seconds, capped at MaxWait.
func (s *Server) parseWait(r *http.Request) (time.Duration, error) {
	q := r.URL.Query().Get("wait")
	if q == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(q)
	if err != nil {
		n, nerr := strconv.Atoi(q)
		if nerr != nil {
			return 0, badRequest("wait", "wait must be a duration like 30s or 2m, or whole seconds, got %q", clip(q))
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, badRequest("wait", "wait must not be negative, got %q", clip(q))
	}
	return min(d, s.cfg.MaxWait), nil
}

// getResult answers 200 with the result of a completed job, 409 for a failed or cancelled
// one, and 202 with the job's status while it is not done (after ?wait= at most).
func (s *Server) getResult(w http.ResponseWriter, r *http.Request) error {
	wait, err := s.parseWait(r)
	if err != nil {
		return err
	}
	st, err := s.status(r)
	if err != nil {
		return err
	}
	if !st.State.Done() && wait > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		_, werr := s.client.Wait(ctx, st.ID, nil)
		cancel()
		if werr != nil && r.Context().Err() != nil {
			return nil // the client went away
		}
		id := st.ID
		if st, err = s.client.Status(r.Context(), id); err != nil {
			return statusNotFound(id, err)
		}
	}
	switch st.State {
	case jobs.StateCompleted:
		if st.Result == nil {
			return serverError(fmt.Errorf("job %s completed without a result", st.ID))
		}
		writeJSON(w, http.StatusOK, st.Result)
		return nil
	case jobs.StateArchived:
		return jobEndError(st)
	}
	writeJSON(w, http.StatusAccepted, viewOf(st))
	return nil
}

// jobEndError is the 409 of a job that ended without a result.
func jobEndError(st jobs.Status) error {
	if st.Result != nil && st.Result.FinishReason == jobs.FinishCancelled {
		return conflict("job_cancelled", "job %s was cancelled", st.ID)
	}
	return conflict("job_failed", "job %s failed: %s", st.ID, st.LastError)
}

// getEvents streams the job as Server-Sent Events: "progress" each time the progress
// changes (phase queued while it waits), "delta" with each piece of its text (a token, or
// what a worker's REDLITE_STREAM_INTERVAL gathered), then one "result" or "error", then the
// stream ends. The progress events leave the text out: it is in the deltas, once. Each
// delta's id is where the reader is: sent back as Last-Event-ID, the stream goes on after
// it. "reset" says the text sent is void (the job ran again and its new attempt's text
// differs): the deltas start over.
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) error {
	st, err := s.status(r)
	if err != nil {
		return err
	}
	var after jobs.TextCursor
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if after, err = jobs.ParseTextCursor(v); err != nil {
			return badRequest("Last-Event-ID", "header Last-Event-ID: %v", err)
		}
	}
	sse, err := startSSE(w)
	if err != nil {
		return err
	}
	defer sse.close()
	send := sse.event
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.MaxWait)
	defer cancel()
	res, err := s.followText(ctx, st.ID, jobs.FollowOptions{
		After:      after,
		OnProgress: func(p jobs.Progress) { send("progress", p.WithoutText()) },
		OnText: func(d jobs.TextDelta) {
			sse.eventID("delta", d.Cursor.String(), delta{Text: d.Text, Reasoning: d.Reasoning, Gap: d.Gap})
		},
		OnReset: func(attempt int) { send("reset", reset{Attempt: attempt + 1}) },
	})
	switch {
	case err == nil:
		send("result", res)
	case r.Context().Err() != nil:
	default:
		if st, serr := s.client.Status(r.Context(), st.ID); serr == nil && st.State == jobs.StateArchived {
			err = jobEndError(st)
		} else if ctx.Err() != nil {
			err = &apiError{status: http.StatusGatewayTimeout, typ: typeServer, code: "timeout",
				msg: fmt.Sprintf("job %s did not finish within REDLITE_API_MAX_WAIT (%v); reconnect to go on waiting", st.ID, s.cfg.MaxWait)}
		}
		e := asAPIError(err)
		code := e.code
		send("error", errorBody{Error: Error{Message: e.msg, Type: e.typ, Code: &code}})
	}
	return nil
}

func (s *Server) deleteJob(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := s.checkOwner(r.Context(), caller(r), id); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), cancelTimeout)
	defer cancel()
	if err := s.client.Cancel(ctx, id); err != nil {
		return statusNotFound(id, err)
	}
	st, err := s.client.Status(r.Context(), id)
	if err != nil {
		return statusNotFound(id, err)
	}
	writeJSON(w, http.StatusOK, viewOf(st))
	return nil
}

type list[T any] struct {
	Object string `json:"object"` // "list"
	Data   []T    `json:"data"`
}

// getWorkers lists the fleet to every token; the jobs of other tenants show without their
// ids (redactWorkers).
func (s *Server) getWorkers(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.client.Workers(r.Context())
	if err != nil {
		return serverError(err)
	}
	out := list[jobs.WorkerServer]{Object: "list", Data: []jobs.WorkerServer{}}
	if len(ws) > 0 {
		if out.Data, err = s.redactWorkers(r.Context(), caller(r), ws); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// Model is an entry of GET /v1/models, in OpenAI's shape.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// servedModels is the set of models the live workers serve; nil when no worker is up yet,
// in which case any model is let through to wait.
func (s *Server) servedModels(ctx context.Context) (map[string]bool, error) {
	ws, err := s.client.Workers(ctx)
	if err != nil {
		return nil, err
	}
	models := jobs.Models(ws)
	if len(models) == 0 {
		return nil, nil
	}
	set := make(map[string]bool, len(models))
	for _, m := range models {
		set[m] = true
	}
	return set, nil
}

// checkModel refuses a model no live worker serves, as OpenAI does, rather than queue a
// job every worker would refuse.
func checkModel(served map[string]bool, model string) error {
	if served == nil || model == "" || served[model] {
		return nil
	}
	names := make([]string, 0, len(served))
	for m := range served {
		names = append(names, m)
	}
	slices.Sort(names)
	return &apiError{status: http.StatusNotFound, typ: typeInvalid, code: "model_not_found", param: "model",
		msg: fmt.Sprintf("the model %q is not served by any live worker; GET /v1/models lists them: %s", clip(model), strings.Join(names, ", "))}
}

func (s *Server) getModels(w http.ResponseWriter, r *http.Request) error {
	ms, err := s.models(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list[Model]{Object: "list", Data: ms})
	return nil
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	ms, err := s.models(r.Context())
	if err != nil {
		return err
	}
	for _, m := range ms {
		if strings.EqualFold(m.ID, id) {
			writeJSON(w, http.StatusOK, m)
			return nil
		}
	}
	return &apiError{status: http.StatusNotFound, typ: typeInvalid, code: "model_not_found", param: "model",
		msg: fmt.Sprintf("the model %q does not exist or no live worker serves it; GET /v1/models lists them", clip(id))}
}

// models lists the models the live workers serve (jobs.Models). A model's created is when a
// worker of it was first seen: the earliest start of its live workers the first time the
// API lists it, kept in keyModelsCreated so that restarting workers do not change it.
func (s *Server) models(ctx context.Context) ([]Model, error) {
	ws, err := s.client.Workers(ctx)
	if err != nil {
		return nil, serverError(err)
	}
	names := jobs.Models(ws)
	out := make([]Model, 0, len(names))
	if len(names) == 0 {
		return out, nil
	}
	cmds, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, m := range names {
			first := time.Now()
			for _, w := range ws {
				if w.Model == m && !w.Started.IsZero() && w.Started.Before(first) {
					first = w.Started
				}
			}
			p.HSetNX(ctx, keyModelsCreated, m, first.Unix())
		}
		p.HMGet(ctx, keyModelsCreated, names...)
		return nil
	})
	if err != nil {
		return nil, serverError(fmt.Errorf("record when models were first seen: %w", err))
	}
	created := cmds[len(cmds)-1].(*redis.SliceCmd).Val()
	for i, m := range names {
		var at int64
		if v, ok := created[i].(string); ok {
			at, _ = strconv.ParseInt(v, 10, 64)
		}
		out = append(out, Model{ID: m, Object: "model", Created: at, OwnedBy: "redlite"})
	}
	return out, nil
}

// WebhookSecret is the answer of GET /v1/webhook_secret.
type WebhookSecret struct {
	Object string `json:"object"` // "webhook_secret"
	// Secret verifies the Redlite-Signature of webhooks of this token's jobs
	// (jobs.VerifyWebhook); it is derived from the workers' REDLITE_WEBHOOK_SECRET.
	Secret string `json:"secret"`
}

func (s *Server) getWebhookSecret(w http.ResponseWriter, r *http.Request) error {
	if len(s.hookSecret) == 0 {
		return &apiError{status: http.StatusNotFound, typ: typeInvalid, code: "webhooks_unsigned",
			msg: "webhooks are not signed here: REDLITE_WEBHOOK_SECRET is not set"}
	}
	writeJSON(w, http.StatusOK, WebhookSecret{Object: "webhook_secret", Secret: string(jobs.TokenWebhookSecret(s.hookSecret, caller(r)))})
	return nil
}
