package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/redlite/batch/jobs"
)

// chatCompletions runs one chat as a job like any other (queued, routed, planned, visible
// in asynqmon) and answers when it is done: with a chat.completion, or with stream: true as
// chat.completion.chunk events: the role at once, comments while the job waits (which keep
// proxies from timing the connection out), a chunk with the text each new piece of the
// job's progress adds (the worker writes it at most every REDLITE_STREAM_INTERVAL), the
// rest of the text with the logprobs when the job is done, then the finish reason.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	g, opts, err := ParseChatRequest(body)
	if err != nil {
		return err
	}
	served, err := s.servedModels(r.Context())
	if err != nil {
		return serverError(fmt.Errorf("list the fleet's models: %w", err))
	}
	if err := checkModel(served, g.Model); err != nil {
		return err
	}
	job, _, err := s.submit(r.Context(), caller(r), g, "chat")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.MaxWait)
	defer cancel()
	// A client that goes away no longer wants the answer: its job is cancelled rather than
	// left to run for nobody.
	defer func() {
		if r.Context().Err() != nil {
			go func() {
				cctx, ccancel := context.WithTimeout(context.Background(), cancelTimeout)
				defer ccancel()
				if err := s.client.Cancel(cctx, job.ID); err != nil && !errors.Is(err, jobs.ErrFinished) {
					s.log.Warn("cancel the job of a closed chat request", "job", job.ID, "err", err)
				}
			}()
		}
	}()
	if !opts.Stream {
		res, err := s.client.Wait(ctx, job.ID, nil)
		if err != nil {
			return s.chatError(r, job.ID, err)
		}
		writeJSON(w, http.StatusOK, completionOf(job.ID, time.Now(), res))
		return nil
	}

	sse, err := startSSE(w)
	if err != nil {
		return err
	}
	defer sse.close()
	created := time.Now().Unix()
	chunk := func(delta map[string]any, finish *string, usage *ChatUsage, model string, lp *jobs.Logprobs) {
		choices := []map[string]any{}
		if delta != nil {
			choices = append(choices, map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": lp})
		}
		c := map[string]any{"id": "chatcmpl-" + job.ID, "object": "chat.completion.chunk", "created": created,
			"model": model, "choices": choices}
		if usage != nil {
			c["usage"] = usage
		}
		sse.event("", c)
	}
	chunk(map[string]any{"role": jobs.RoleAssistant, "content": ""}, nil, nil, g.Model, nil)
	var text textReader
	content := func(d delta) map[string]any {
		m := map[string]any{"content": d.Text}
		if d.Reasoning != "" {
			m["reasoning_content"] = d.Reasoning
		}
		return m
	}
	res, err := s.client.WaitEvery(ctx, job.ID, s.cfg.StreamPollInterval, func(p jobs.Progress) {
		if d := text.progress(p); !d.empty() {
			chunk(content(d), nil, nil, g.Model, nil)
			return
		}
		sse.comment(fmt.Sprintf("%s %d/%d", p.Phase, p.Generated, p.MaxTokens))
	})
	if err != nil {
		if r.Context().Err() != nil {
			return nil
		}
		e := asAPIError(s.chatError(r, job.ID, err))
		code := e.code
		sse.event("", errorBody{Error: Error{Message: e.msg, Type: e.typ, Code: &code}})
		return nil
	}
	// The logprobs are only in the result: they come with the last piece of text.
	if d := text.result(res); !d.empty() || res.Logprobs != nil {
		if d.Gap {
			s.log.Warn("a streamed chat's result does not continue the text streamed", "job", job.ID)
		}
		chunk(content(d), nil, nil, res.Model, res.Logprobs)
	}
	finish := string(res.FinishReason)
	chunk(map[string]any{}, &finish, nil, res.Model, nil)
	if opts.IncludeUsage {
		u := ChatUsage(res.Usage)
		chunk(nil, nil, &u, res.Model, nil)
	}
	sse.event("", "[DONE]")
	return nil
}

// chatError explains a chat job that did not complete.
func (s *Server) chatError(r *http.Request, id string, err error) error {
	var je *jobs.JobError
	switch {
	case errors.As(err, &je) && je.Cancelled:
		return conflict("job_cancelled", "job %s was cancelled", id)
	case errors.As(err, &je) && jobs.ContextLengthExceeded(je.LastError):
		// The worker counted the prompt with the tokenizer: a 400 the SDKs do not retry.
		return contextLengthExceeded(je.LastError)
	case errors.As(err, &je):
		return &apiError{status: http.StatusInternalServerError, typ: typeServer, code: "job_failed", msg: fmt.Sprintf("job %s failed: %s", id, je.LastError)}
	case r.Context().Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusGatewayTimeout, typ: typeServer, code: "timeout",
			msg: fmt.Sprintf("job %s did not finish within REDLITE_API_MAX_WAIT (%v); it goes on: GET /v1/jobs/%s/result", id, s.cfg.MaxWait, id)}
	}
	return err
}
