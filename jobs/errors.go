package jobs

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors at the package edge; test with errors.Is.
var (
	// ErrBadPayload: the payload is not valid JSON of the right shape or breaks a limit.
	// The error is a *ValidationError naming the field.
	ErrBadPayload = errors.New("bad payload")
	// ErrDuplicate: a job with the same idempotency key exists; Enqueue returns its id.
	ErrDuplicate = errors.New("duplicate idempotency key")
	// ErrNotFound: no job with this id in any of our queues (never enqueued, deleted, or
	// its retention expired).
	ErrNotFound = errors.New("job not found")
	// ErrNotDone: the job has not finished yet.
	ErrNotDone = errors.New("job not finished")
	// ErrFailed: the job was archived without completing (bad payload, retries exhausted,
	// cancelled). The error is a *JobError with asynq's last error message.
	ErrFailed = errors.New("job failed")
	// ErrCancelled: the job was cancelled; a *JobError that also matches ErrFailed.
	ErrCancelled = errors.New("job cancelled")
	// ErrFinished: Cancel was asked for a job that had already finished.
	ErrFinished = errors.New("job already finished")
)

// ValidationError names the payload field that is wrong and why. Field is a path such as
// "max_tokens" or "messages[2].role"; it is empty for faults of the whole document.
type ValidationError struct {
	Field string
	Msg   string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Is makes errors.Is(err, ErrBadPayload) true.
func (e *ValidationError) Is(target error) bool { return target == ErrBadPayload }

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ErrContextLength begins the error a worker archives a job with when, its prompt counted
// with the model's tokenizer, no live worker of the model can hold it (prompt + max_tokens):
// the API answers such a job 400 context_length_exceeded, as it refuses at submit the jobs
// whose estimate already tells (RouteJob).
var ErrContextLength = errors.New("context_length_exceeded")

// ContextLengthExceeded reports whether a job's last error (asynq's message, JobError's
// LastError) is a worker's ErrContextLength.
func ContextLengthExceeded(lastError string) bool {
	return strings.Contains(lastError, ErrContextLength.Error()+": ")
}

// JobError describes a job that ended without completing.
type JobError struct {
	ID        string
	State     State
	LastError string // asynq's last error message, e.g. the validation error
	Cancelled bool
}

func (e *JobError) Error() string {
	what := "failed"
	if e.Cancelled {
		what = "was cancelled"
	}
	if e.LastError == "" {
		return fmt.Sprintf("job %s %s (%s)", e.ID, what, e.State)
	}
	return fmt.Sprintf("job %s %s (%s): %s", e.ID, what, e.State, e.LastError)
}

// Is makes errors.Is(err, ErrFailed) true, and ErrCancelled for a cancelled job.
func (e *JobError) Is(target error) bool {
	return target == ErrFailed || (e.Cancelled && target == ErrCancelled)
}
