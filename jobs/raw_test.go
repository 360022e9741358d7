package jobs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// The tests here back the README's claim that a client without asynq can enqueue with raw
// Redis commands: they write asynq's task message by hand (no protobuf library) and check
// that an asynq server runs the task and that jobs.Client sees it.

// pbMessage hand-encodes asynq's TaskMessage, as a client in another language would.
func pbMessage(typ string, payload []byte, id, queue string, retry, timeout, deadline, retention int64) []byte {
	var b []byte
	str := func(field int, s []byte) {
		b = binary.AppendUvarint(b, uint64(field<<3|2))
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	num := func(field int, v int64) {
		if v != 0 {
			b = binary.AppendUvarint(b, uint64(field<<3))
			b = binary.AppendUvarint(b, uint64(v))
		}
	}
	str(1, []byte(typ))
	str(2, payload)
	str(3, []byte(id))
	str(4, []byte(queue))
	num(5, retry)
	num(8, timeout)
	num(9, deadline)
	num(12, retention)
	return b
}

// rawEnqueueScript is the README's script.
const rawEnqueueScript = `
if redis.call("EXISTS", KEYS[1]) == 1 then
  return 0
end
redis.call("HSET", KEYS[1], "msg", ARGV[1], "state", "pending", "pending_since", ARGV[3])
redis.call("LPUSH", KEYS[2], ARGV[2])
return 1`

// echoWorker completes each job with a result whose text is the job's input or prompt.
func echoWorker(t *testing.T, b *testBundle, got chan<- Payload) {
	startWorker(t, b, func(ctx context.Context, task *asynq.Task) error {
		p, err := Decode(task.Type(), task.Payload())
		if err != nil {
			return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
		}
		got <- p
		text := ""
		switch p := p.(type) {
		case *Summarize:
			text = p.Input
		case *Generate:
			text = p.Prompt
		}
		env, err := EncodeResult(sampleResult(text, p.Options().Metadata))
		if err != nil {
			return err
		}
		_, err = task.ResultWriter().Write(env)
		return err
	})
}

func TestRawRedisEnqueue(t *testing.T) {
	ctx := context.Background()
	c, b := setup(t)
	payload := []byte(`{"version":1,"input":"Raw document.","metadata":{"from":"raw"}}`)
	msg := pbMessage(TypeSummarize, payload, "raw-1", QueueDefault, 3, 600, 0, 3600)

	if err := c.rdb.SAdd(ctx, "asynq:queues", QueueDefault).Err(); err != nil {
		t.Fatal(err)
	}
	keys := []string{"asynq:{default}:t:raw-1", "asynq:{default}:pending"}
	args := []any{msg, "raw-1", time.Now().UnixNano()}
	n, err := c.rdb.Eval(ctx, rawEnqueueScript, keys, args...).Int()
	if err != nil || n != 1 {
		t.Fatalf("EVAL = %d, %v", n, err)
	}
	if n, _ := c.rdb.Eval(ctx, rawEnqueueScript, keys, args...).Int(); n != 0 {
		t.Errorf("second EVAL with the same id = %d, want 0 (refused)", n)
	}

	st, err := c.Status(ctx, "raw-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StatePending || st.Type != TypeSummarize || st.Timeout != 600*time.Second || st.MaxRetry != 3 || st.Retention != time.Hour {
		t.Errorf("status of the raw job = %+v", st)
	}
	// The Go client's idempotency check sees raw jobs too.
	if _, err := c.Enqueue(ctx, &Summarize{Input: "x", Common: Common{IdempotencyKey: "raw-1"}}); !errors.Is(err, ErrDuplicate) {
		t.Errorf("Enqueue over a raw job: %v, want ErrDuplicate", err)
	}

	got := make(chan Payload, 1)
	echoWorker(t, b, got)
	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	res, err := c.Wait(wctx, "raw-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "Raw document." || string(res.Metadata) != `{"from":"raw"}` {
		t.Errorf("result = %+v", res)
	}
	if p := <-got; p.(*Summarize).Input != "Raw document." {
		t.Errorf("worker decoded %+v", p)
	}
}

// TestRawEnqueueFromPython runs examples/raw_enqueue.py, the stdlib-only reference for
// other languages, against a real Redis and a real asynq server.
func TestRawEnqueueFromPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH; TestRawRedisEnqueue covers the same commands from Go")
	}
	ctx := context.Background()
	c, b := setup(t)
	run := func(typ, doc string) (string, error) {
		cmd := exec.Command(py, "examples/raw_enqueue.py", "--addr", b.redis.Addr(), "--type", typ)
		cmd.Stdin = strings.NewReader(doc)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			return "", fmt.Errorf("%v: %s", err, errb.String())
		}
		return strings.TrimSpace(out.String()), nil
	}
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	id, err := run(TypeGenerate, `{"version":1,"prompt":"From Python.","priority":"high","idempotency_key":"py-1","deadline":"`+
		deadline.Format(time.RFC3339)+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	if id != "py-1" {
		t.Fatalf("printed id %q", id)
	}
	if _, err := run(TypeGenerate, `{"version":1,"prompt":"again","idempotency_key":"py-1","priority":"high"}`); err == nil ||
		!strings.Contains(err.Error(), "duplicate") {
		t.Errorf("second enqueue with the same key: %v", err)
	}
	st, err := c.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Queue != QueueCritical || !st.Deadline.Equal(deadline) || st.Timeout != 0 || st.Retention != 24*time.Hour {
		t.Errorf("status = %+v", st)
	}
	got := make(chan Payload, 1)
	echoWorker(t, b, got)
	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	res, err := c.Wait(wctx, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "From Python." {
		t.Errorf("result text %q", res.Text)
	}
}
