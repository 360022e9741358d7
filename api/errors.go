package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/jobs"
)

// Error is an OpenAI-shaped error body: {"error": {"message", "type", "param", "code"}}.
// OpenAI's SDKs read message and code from it, so every error of the API has this shape.
type Error struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

type errorBody struct {
	Error Error `json:"error"`
}

// Error types, as OpenAI names them.
const (
	typeInvalid = "invalid_request_error"
	typeAuth    = "authentication_error"
	typeRate    = "rate_limit_error"
	typeServer  = "server_error"
)

// apiError is an error a handler returns: the status, and the body's fields.
type apiError struct {
	status     int
	typ, code  string
	param, msg string
	retryAfter time.Duration
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typeInvalid, code: "invalid_request", param: param, msg: fmt.Sprintf(format, args...)}
}

func notFound(what, id string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: typeInvalid, code: "not_found", msg: fmt.Sprintf("no %s with id %q", what, id)}
}

func conflict(code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusConflict, typ: typeInvalid, code: code, msg: fmt.Sprintf(format, args...)}
}

// serverError is a 500, or the 503 redis_unavailable of a Redis that refuses (out of memory,
// bad credentials): every Redis error of the API passes through here or asAPIError.
func serverError(err error) *apiError {
	if err := redisx.Classify(err); errors.Is(err, jobs.ErrRedisOOM) || errors.Is(err, jobs.ErrRedisAuth) {
		return redisUnavailable(err)
	}
	return &apiError{status: http.StatusInternalServerError, typ: typeServer, code: "server_error", msg: err.Error()}
}

// redisUnavailableRetry is the Retry-After of a 503 redis_unavailable: memory is freed as
// results expire and clients delete files, in seconds to minutes.
const redisUnavailableRetry = 10 * time.Second

func redisUnavailable(err error) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "redis_unavailable", msg: err.Error(), retryAfter: redisUnavailableRetry}
}

// asAPIError maps the errors of jobs and of request decoding to statuses.
func asAPIError(err error) *apiError {
	var ae *apiError
	var ve *jobs.ValidationError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalid, code: "request_too_large",
			msg: fmt.Sprintf("request body is larger than the limit of %d bytes", mbe.Limit)}
	case errors.As(err, &ve):
		return &apiError{status: http.StatusBadRequest, typ: typeInvalid, code: "invalid_payload", param: ve.Field, msg: ve.Error()}
	case errors.Is(err, jobs.ErrNotFound):
		return &apiError{status: http.StatusNotFound, typ: typeInvalid, code: "not_found", msg: err.Error()}
	case errors.Is(err, jobs.ErrUnknownModel):
		// The fleet's refusal at submit (jobs.Client routing): the message lists the served models.
		return &apiError{status: http.StatusNotFound, typ: typeInvalid, code: "model_not_found", param: "model", msg: err.Error()}
	case errors.Is(err, jobs.ErrNoCapacity):
		return contextLengthExceeded(err.Error())
	case errors.Is(err, jobs.ErrFinished):
		return conflict("job_finished", "%v", err)
	case errors.Is(err, jobs.ErrRedisOOM), errors.Is(err, jobs.ErrRedisAuth):
		return redisUnavailable(err)
	}
	return serverError(err)
}

// contextLengthExceeded is OpenAI's answer to a prompt longer than the model takes: a 400,
// which clients do not retry (a 5xx or 422 they may). msg has the numbers: jobs.RouteError's
// at submit, the worker's (jobs.ErrContextLength) once it counted the prompt's tokens.
func contextLengthExceeded(msg string) *apiError {
	msg = strings.Replace(msg, jobs.ErrContextLength.Error()+": ", "", 1) // the code says it
	return &apiError{status: http.StatusBadRequest, typ: typeInvalid, code: "context_length_exceeded", param: "messages", msg: msg}
}

func writeError(w http.ResponseWriter, err error) {
	e := asAPIError(err)
	body := errorBody{Error: Error{Message: e.msg, Type: e.typ}}
	if e.param != "" {
		body.Error.Param = &e.param
	}
	if e.code != "" {
		body.Error.Code = &e.code
	}
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(e.retryAfter.Round(time.Second)/time.Second)))
	}
	writeJSON(w, e.status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encode response","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
