package redisx

import (
	"fmt"

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
	for rest := msg; len(rest) > 0; {
		field, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return nil, fmt.Errorf("task message: bad field tag at byte %d: %v", len(msg)-len(rest), protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(field, typ, rest[n:])
		if m < 0 {
			return nil, fmt.Errorf("task message: field %d: %v", field, protowire.ParseError(m))
		}
		if field != taskMessageQueue {
			out = append(out, rest[:n+m]...)
		}
		rest = rest[n+m:]
	}
	out = protowire.AppendTag(out, taskMessageQueue, protowire.BytesType)
	return protowire.AppendString(out, queue), nil
}
