package daemon

import (
	"errors"
	"log/slog"

	"github.com/hibiken/asynq"
)

// ErrEngineFault matches every *EngineFault.
var ErrEngineFault = errors.New("engine fault")

// EngineFault is a failure while running a job that another attempt may not meet: an engine
// error, or a panic anywhere in the pipeline (Stack holds the goroutine's stack). asynq
// retries the job with back-off.
type EngineFault struct {
	Err   error
	Stack string
}

func (e *EngineFault) Error() string { return "engine fault: " + e.Err.Error() }

func (e *EngineFault) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrEngineFault) true.
func (e *EngineFault) Is(target error) bool { return target == ErrEngineFault }

// permanentError is a failure no retry can cure (a bad payload, a job that does not fit): it
// matches asynq.SkipRetry, so asynq archives the job at once, while its message, which asynq
// stores as the job's last error, is only the reason.
type permanentError struct{ err error }

func permanent(err error) error { return &permanentError{err} }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{e.err, asynq.SkipRetry} }

// errShuttingDown is the cause of the handlers' context when the daemon stops a job that did
// not finish within the shutdown timeout; asynq has already put the job back in its queue.
var errShuttingDown = errors.New("daemon shutting down: job handed back to its queue")

// errOrphaned is the cause of an attempt's context when its job was found orphaned by another
// worker (this one's heartbeats stopped: frozen, not dead) and sent to run again: its
// writes are refused (taskWriter) and it stops.
var errOrphaned = errors.New("this attempt was taken for orphaned (its worker's heartbeats stopped) and the job runs again elsewhere")

// onOrphaned is what a taskWriter does when its attempt was found orphaned: log it and call
// Options.Orphaned, which ends the process. asynq would otherwise, when the handler returns,
// remove the job from the active list and the lease set by its id, which its new attempt
// holds now.
func (w *worker) onOrphaned(log *slog.Logger) func() {
	return func() {
		log.Error("this worker was taken for dead: its heartbeats had stopped (the process was frozen) and another worker runs the job again; exiting at once so as not to touch it", "err", errOrphaned)
		if w.orphaned != nil {
			w.orphaned()
		}
	}
}

// ErrConfig matches every error of the configuration: an invalid REDLITE_* value, or a
// file it names that cannot be used (a model that does not load, a bad calibration).
// redlited exits 2 for them, as the README says.
var ErrConfig = errors.New("invalid configuration")

type configError struct{ err error }

func (e *configError) Error() string   { return e.err.Error() }
func (e *configError) Unwrap() []error { return []error{e.err, ErrConfig} }

// configErr marks err as a configuration error (nil stays nil).
func configErr(err error) error {
	if err == nil {
		return nil
	}
	return &configError{err}
}
