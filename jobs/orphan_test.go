package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/internal/redisx"
)

// TestRetryOrphan sends a job its worker holds to asynq's retry set as asynq's recoverer
// would once its lease expired: only under the lease as read, exactly once, with the attempt
// counted, and asynq runs it again as its second attempt.
func TestRetryOrphan(t *testing.T) {
	if testing.Short() {
		t.Skip("orphan retries against a live lease (-short skips it)")
	}
	c, b := setup(t)
	ctx := context.Background()
	job, err := c.Enqueue(ctx, &Generate{Prompt: "orphan"}, MaxRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan int, 2) // the attempts' retry counts
	hold := make(chan struct{})
	startWorker(t, b, func(ctx context.Context, task *asynq.Task) error {
		n, _ := asynq.GetRetryCount(ctx)
		started <- n
		if n == 0 {
			<-hold // the first attempt's worker "dies": it holds the job until the test ends
		}
		return nil
	})
	t.Cleanup(func() { close(hold) }) // before the worker's shutdown (cleanups run in reverse)
	select {
	case <-started:
	case <-time.After(waitLimit):
		t.Fatal("the worker never took the job")
	}

	const lost = "asynq: task lease expired"
	if err := c.RetryOrphan(ctx, job.Queue, job.ID, 1, -1, lost); !errors.Is(err, ErrNotActive) {
		t.Fatalf("under a lease it does not hold: %v, want ErrNotActive", err)
	}
	// The live worker extends its lease every 5 s: a read that straddles an extension is
	// refused, as it must be, and read again.
	for try := 0; ; try++ {
		lease, err := c.rdb.ZScore(ctx, "asynq:{"+job.Queue+"}:lease", job.ID).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.RetryOrphan(ctx, job.Queue, job.ID, lease, 1, lost); !errors.Is(err, ErrNotActive) {
			t.Fatalf("in an attempt it is not in: %v, want ErrNotActive", err)
		}
		err = c.RetryOrphan(ctx, job.Queue, job.ID, lease, 0, lost)
		if err == nil {
			if err := c.RetryOrphan(ctx, job.Queue, job.ID, lease, -1, lost); !errors.Is(err, ErrNotActive) {
				t.Fatalf("a second retry of the same attempt: %v, want ErrNotActive", err)
			}
			break
		}
		if !errors.Is(err, ErrNotActive) || try == 3 {
			t.Fatalf("retry under the lease as read: %v", err)
		}
	}

	// The orphaned attempt, should its worker wake, writes nothing; the next one does.
	if err := c.WriteAttemptEnvelope(ctx, job.Queue, job.ID, 0, EncodeProgress(Progress{Generated: 1})); !errors.Is(err, ErrAttemptOrphaned) {
		t.Errorf("a write of the orphaned attempt: %v, want ErrAttemptOrphaned", err)
	}
	if err := c.WriteAttemptEnvelope(ctx, job.Queue, job.ID, 1, EncodeProgress(Progress{Generated: 2})); err != nil {
		t.Errorf("a write of the next attempt: %v", err)
	}
	info, err := c.insp.GetTaskInfo(job.Queue, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != asynq.TaskStateRetry || info.Retried != 1 || info.LastErr != lost || time.Since(info.LastFailedAt) > time.Minute {
		t.Errorf("after the retry, asynq reads: state %v, retried %d, last error %q, failed at %v", info.State, info.Retried, info.LastErr, info.LastFailedAt)
	}
	if !strings.Contains(string(info.Payload), "orphan") || info.MaxRetry != 2 {
		t.Errorf("the message lost a field: %+v", info)
	}
	if q, err := c.insp.GetQueueInfo(job.Queue); err != nil || q.Processed != 1 || q.Failed != 1 || q.Active != 0 {
		t.Errorf("queue counts after the retry: %+v, %v; want 1 processed, 1 failed, 0 active", q, err)
	}

	// asynq's forwarder makes it pending; the worker runs it as its second attempt once free.
	hold <- struct{}{}
	select {
	case n := <-started:
		if n != 1 {
			t.Errorf("the re-run's retry count: %d, want 1", n)
		}
	case <-time.After(waitLimit):
		t.Fatal("asynq never ran the retried job")
	}
	eventually(t, "the re-run completes", func() (bool, string) {
		st, err := c.Status(ctx, job.ID)
		return err == nil && st.State == StateCompleted, string(st.State)
	})

	spent, err := c.Enqueue(ctx, &Generate{Prompt: "no retries"}, MaxRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RetryOrphan(ctx, spent.Queue, spent.ID, 1, -1, lost); !errors.Is(err, ErrRetriesSpent) {
		t.Errorf("a job without retries: %v, want ErrRetriesSpent", err)
	}
}

// FuzzSetTaskRetried: any bytes as a task message give an error or a message whose retry
// count reads back as set, never a panic.
func FuzzSetTaskRetried(f *testing.F) {
	f.Add([]byte{0x0a, 0x01, 'g', 0x22, 0x07, 'd', 'e', 'f', 'a', 'u', 'l', 't', 0x28, 0x03, 0x30, 0x01}, int64(2), "e")
	f.Add([]byte{0x30, 0xff}, int64(0), "")
	f.Fuzz(func(t *testing.T, msg []byte, n int64, e string) {
		out, err := redisx.SetTaskRetried(msg, n, e, time.Now())
		if err != nil {
			return
		}
		if _, got, err := redisx.TaskRetries(out); err != nil || got != n {
			t.Fatalf("retried reads back %d, %v; want %d", got, err, n)
		}
	})
}
