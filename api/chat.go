package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/redlite/batch/jobs"
)

// textRoute is one of the OpenAI routes that run one generate job and answer with its
// text: chat completions, completions and responses. They share the mapping of the body
// (chatmap.go), the job, the wait and the stream's loop; each has its own parameters,
// answer and stream events.
type textRoute struct {
	endpoint string
	// source is the source label of the route's jobs in redlite_api_jobs_enqueued_total.
	source  string
	mapping mapping
	// reply is the answer of a finished job, live and in a batch's output file.
	reply func(jobID string, created time.Time, res jobs.Result) any
	// stream begins the answer of a request with stream: true.
	stream func(sse *sseStream, jobID string, g *jobs.Generate, o ChatOptions) textStream
}

// textStream writes one route's stream events.
type textStream interface {
	// start is sent once the job is enqueued.
	start()
	// text is new text of the first completion, as the job's progress shows it.
	text(d delta)
	// done ends the stream: rest is the first completion's text the progress did not show.
	done(res jobs.Result, rest delta)
	// fail ends the stream with the error that ended the job.
	fail(e *apiError)
}

var (
	chatRoute = &textRoute{endpoint: chatEndpoint, source: "chat", mapping: chatMapping,
		reply: func(id string, created time.Time, res jobs.Result) any { return completionOf(id, created, res) }, stream: newChatStream}
	completionRoute = &textRoute{endpoint: completionsEndpoint, source: "completions", mapping: completionMapping,
		reply: textCompletionOf, stream: newCompletionStream}
	responseRoute = &textRoute{endpoint: responsesEndpoint, source: "responses", mapping: responseMapping,
		reply: func(id string, created time.Time, res jobs.Result) any {
			return responseOf(id, created, &res, res.Model)
		}, stream: newResponseStream}
)

// textRouteFor is the route of a batch endpoint; nil for an endpoint a batch cannot have.
func textRouteFor(endpoint string) *textRoute {
	for _, rt := range []*textRoute{chatRoute, completionRoute, responseRoute} {
		if rt.endpoint == endpoint {
			return rt
		}
	}
	return nil
}

// named gives a context_length_exceeded the route's prompt parameter.
func (rt *textRoute) named(err error) error {
	if e := asAPIError(err); e.code == "context_length_exceeded" {
		e.param = rt.mapping.prompt
		return e
	}
	return err
}

// textHandler runs one request as a job like any other (queued, routed, planned, visible in
// asynqmon) and answers when it is done, or with stream: true as the route's events: the
// start at once, comments while the job waits (which keep proxies from timing the
// connection out), an event per piece of the first completion's text stream (a token, or
// what a worker's REDLITE_STREAM_INTERVAL gathered) and the rest of its text, then the
// logprobs and the other completions when the job is done, then the end.
func (s *Server) textHandler(rt *textRoute) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		body, err := readBody(w, r, s.cfg.MaxBodyBytes)
		if err != nil {
			return err
		}
		g, opts, err := rt.mapping.parse(body)
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
		job, _, err := s.submit(r.Context(), caller(r), g, rt.source)
		if err != nil {
			return rt.named(err)
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.MaxWait)
		defer cancel()
		// A client that goes away no longer wants the answer: its job is cancelled rather
		// than left to run for nobody.
		defer func() {
			if r.Context().Err() != nil {
				go func() {
					cctx, ccancel := context.WithTimeout(context.Background(), cancelTimeout)
					defer ccancel()
					if err := s.client.Cancel(cctx, job.ID); err != nil && !errors.Is(err, jobs.ErrFinished) {
						s.log.Warn("cancel the job of a closed request", "job", job.ID, "err", err)
					}
				}()
			}
		}()
		if !opts.Stream {
			res, err := s.client.Wait(ctx, job.ID, nil)
			if err != nil {
				return rt.named(s.chatError(r, job.ID, err))
			}
			writeJSON(w, http.StatusOK, rt.reply(job.ID, time.Now(), res))
			return nil
		}

		sse, err := startSSE(w)
		if err != nil {
			return err
		}
		defer sse.close()
		out := rt.stream(sse, job.ID, g, opts)
		out.start()
		res, err := s.followText(ctx, job.ID, jobs.FollowOptions{
			OnText: func(d jobs.TextDelta) { out.text(delta{Text: d.Text, Reasoning: d.Reasoning}) },
			OnProgress: func(p jobs.Progress) {
				sse.comment(fmt.Sprintf("%s %d/%d", p.Phase, p.Generated, p.MaxTokens))
			},
		})
		if err != nil {
			if r.Context().Err() != nil {
				return nil
			}
			out.fail(asAPIError(rt.named(s.chatError(r, job.ID, err))))
			return nil
		}
		out.done(res, delta{}) // followText handed out the whole text
		return nil
	}
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
	case errors.Is(err, jobs.ErrTextDiverged):
		// Only a stream gets here: the text it sent cannot be taken back.
		return &apiError{status: http.StatusInternalServerError, typ: typeServer, code: "stream_diverged",
			msg: fmt.Sprintf("job %s ran again after its worker stopped, and the new attempt's text differs from the text streamed; send the request again, or read GET /v1/jobs/%s/result", id, id)}
	case r.Context().Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusGatewayTimeout, typ: typeServer, code: "timeout",
			msg: fmt.Sprintf("job %s did not finish within REDLITE_API_MAX_WAIT (%v); it goes on: GET /v1/jobs/%s/result", id, s.cfg.MaxWait, id)}
	}
	return err
}
