package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/jobs"
)

// A job past its payload deadline can never succeed, so it is archived at once. asynq
// does not let the handler decide this: when a task's context ends (its deadline, which
// the client copies from the payload's), asynq's processor stops waiting for the handler
// and fails the attempt with ctx.Err(), and an attempt that starts past the deadline fails
// before the handler is even called. Both go to retry until the retries are spent. So
// asynq's ErrorHandler, called just before asynq writes the retry, starts an archiver that
// archives the job once it has left the active state; meanwhile retryDelay parks the job
// for expiredRetryDelay, so that it never runs again in between. If the worker dies before
// archiving, the parked job's next attempt fails at once and is archived then.

// expiredRetryDelay is how long a job past its deadline waits in retry for its archiver.
const expiredRetryDelay = time.Hour

// archiveWithin bounds how long an archiver waits for asynq to move the job out of active
// (a few milliseconds normally; longer only while Redis is away).
const archiveWithin = time.Minute

// pastDeadline says whether a failed attempt's error is the payload's deadline passing.
func pastDeadline(t *asynq.Task, err error) bool {
	if !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	d := payloadDeadline(t)
	return !d.IsZero() && !time.Now().Before(d)
}

// payloadDeadline is the payload's deadline, zero when it has none (or is invalid).
func payloadDeadline(t *asynq.Task) time.Time {
	p, err := jobs.Decode(t.Type(), t.Payload())
	if err != nil || p.Options().Deadline == nil {
		return time.Time{}
	}
	return *p.Options().Deadline
}

// handleError is asynq's ErrorHandler: it runs for every failed attempt before asynq retries
// or archives the job.
func (w *worker) handleError(ctx context.Context, t *asynq.Task, err error) {
	if errors.Is(err, asynq.SkipRetry) || !pastDeadline(t, err) {
		return // asynq archives it, or it may succeed on another attempt
	}
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	if retried >= maxRetry {
		return // asynq archives it itself
	}
	id, _ := asynq.GetTaskID(ctx)
	queue, _ := asynq.GetQueueName(ctx)
	w.archiving.Add(1)
	go func() {
		defer w.archiving.Done()
		w.archiveExpired(queue, id, payloadDeadline(t))
	}()
}

// archiveExpired archives the job once asynq has moved it out of active. asynq announces
// no state change, so it looks, with a back-off from 5 ms to 1 s, for at most archiveWithin.
func (w *worker) archiveExpired(queue, id string, deadline time.Time) {
	log := w.log.With("job", id, "queue", queue)
	giveUp := time.NewTimer(archiveWithin)
	defer giveUp.Stop()
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		info, err := w.insp.GetTaskInfo(queue, id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			return // deleted meanwhile
		case err == nil && info.State == asynq.TaskStateArchived:
			return
		case err == nil && info.State != asynq.TaskStateActive:
			if err = w.insp.ArchiveTask(queue, id); err == nil {
				log.Info("job archived: its deadline passed", "deadline", deadline.Format(time.RFC3339))
				return
			}
		}
		if err != nil {
			log.Debug("archive a job past its deadline", "err", err)
		}
		select {
		case <-w.stopArchiving:
			log.Warn("shutting down before a job past its deadline was archived; it is parked in retry and will be archived when it next runs", "retry_in", expiredRetryDelay)
			return
		case <-giveUp.C:
			log.Warn("could not archive a job past its deadline; it is parked in retry and will be archived when it next runs", "retry_in", expiredRetryDelay, "err", err)
			return
		case <-time.After(delay):
		}
	}
}
