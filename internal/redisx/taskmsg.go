package redisx

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// taskMessageQueue is the field number of the queue name in asynq's TaskMessage (asynq
// v0.26 internal/proto/asynq.proto: string queue = 4).
const taskMessageQueue = 4

// SetTaskQueue returns asynq's protobuf TaskMessage msg with its queue field set to queue and
// every other field as it was, in its order. The message is asynq's internal type, so it is
// read at the wire level: a malformed message is an error, never a panic.
func SetTaskQueue(msg []byte, queue string) ([]byte, error) {
	out := make([]byte, 0, len(msg)+len(queue))
	err := walkTaskMessage(msg, func(field protowire.Number, whole, _ []byte) {
		if field != taskMessageQueue {
			out = append(out, whole...)
		}
	})
	if err != nil {
		return nil, err
	}
	out = protowire.AppendTag(out, taskMessageQueue, protowire.BytesType)
	return protowire.AppendString(out, queue), nil
}

// Field numbers of asynq's TaskMessage that the jobs package reads or rewrites.
const (
	taskMessageType         = 1  // string type
	taskMessagePayload      = 2  // bytes payload
	taskMessageErrorMsg     = 7  // string error_msg
	taskMessageLastFailedAt = 11 // int64 last_failed_at, Unix seconds
)

// walkTaskMessage calls fn with each field of TaskMessage msg: its number, the whole encoded
// field (tag included) and its value's bytes.
func walkTaskMessage(msg []byte, fn func(field protowire.Number, whole, value []byte)) error {
	for rest := msg; len(rest) > 0; {
		field, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return fmt.Errorf("task message: bad field tag at byte %d: %v", len(msg)-len(rest), protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(field, typ, rest[n:])
		if m < 0 {
			return fmt.Errorf("task message: field %d: %v", field, protowire.ParseError(m))
		}
		fn(field, rest[:n+m], rest[n:n+m])
		rest = rest[n+m:]
	}
	return nil
}

// TaskTypeAndPayload reads a TaskMessage's type and payload; a malformed message is an error.
func TaskTypeAndPayload(msg []byte) (typ string, payload []byte, err error) {
	err = walkTaskMessage(msg, func(field protowire.Number, _, value []byte) {
		switch field {
		case taskMessageType:
			s, _ := protowire.ConsumeString(value)
			typ = s
		case taskMessagePayload:
			payload, _ = protowire.ConsumeBytes(value)
		}
	})
	return typ, payload, err
}

// SetTaskFailure returns TaskMessage msg with its last error and the time of its last
// failure set, as asynq writes them when it archives a job, and every other field as it was.
func SetTaskFailure(msg []byte, reason string, at time.Time) ([]byte, error) {
	out := make([]byte, 0, len(msg)+len(reason)+16)
	err := walkTaskMessage(msg, func(field protowire.Number, whole, _ []byte) {
		if field != taskMessageErrorMsg && field != taskMessageLastFailedAt {
			out = append(out, whole...)
		}
	})
	if err != nil {
		return nil, err
	}
	out = protowire.AppendTag(out, taskMessageErrorMsg, protowire.BytesType)
	out = protowire.AppendString(out, reason)
	out = protowire.AppendTag(out, taskMessageLastFailedAt, protowire.VarintType)
	return protowire.AppendVarint(out, uint64(at.Unix())), nil
}

// The retry fields of a TaskMessage, which a worker sets when it does what asynq's recoverer
// would (jobs.Client.RetryOrphan).
const (
	taskMessageRetry   = 5 // int32 retry: attempts allowed after the first
	taskMessageRetried = 6 // int32 retried: failed attempts so far
)

// TaskRetries reads a TaskMessage's retry limit and its failed attempts so far (0 when
// absent, as protobuf has it); a malformed message is an error.
func TaskRetries(msg []byte) (retry, retried int64, err error) {
	err = walkTaskMessage(msg, func(field protowire.Number, _, value []byte) {
		v, _ := protowire.ConsumeVarint(value)
		switch field {
		case taskMessageRetry:
			retry = int64(v)
		case taskMessageRetried:
			retried = int64(v)
		}
	})
	return retry, retried, err
}

// SetTaskRetried returns TaskMessage msg with retried failed attempts, its last error and the
// time of its last failure set, as asynq writes them when it retries a job, and every other
// field as it was.
func SetTaskRetried(msg []byte, retried int64, reason string, at time.Time) ([]byte, error) {
	failed, err := SetTaskFailure(msg, reason, at)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(failed)+8)
	err = walkTaskMessage(failed, func(field protowire.Number, whole, _ []byte) {
		if field != taskMessageRetried {
			out = append(out, whole...)
		}
	})
	if err != nil {
		return nil, err
	}
	out = protowire.AppendTag(out, taskMessageRetried, protowire.VarintType)
	return protowire.AppendVarint(out, uint64(retried)), nil
}
