package redisx

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestSetTaskQueue: the queue field is replaced, every other field kept, and malformed
// messages are errors.
func TestSetTaskQueue(t *testing.T) {
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.BytesType)
	msg = protowire.AppendString(msg, "generate")
	msg = protowire.AppendTag(msg, 4, protowire.BytesType)
	msg = protowire.AppendString(msg, "default")
	msg = protowire.AppendTag(msg, 5, protowire.VarintType)
	msg = protowire.AppendVarint(msg, 3)
	out, err := SetTaskQueue(msg, "qwen@4g")
	if err != nil {
		t.Fatal(err)
	}
	fields := map[protowire.Number][]byte{}
	for rest := out; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if n < 0 || m < 0 {
			t.Fatalf("output does not parse at %x", rest)
		}
		if _, dup := fields[num]; dup {
			t.Fatalf("field %d twice", num)
		}
		fields[num] = rest[n : n+m]
		rest = rest[n+m:]
	}
	if q, _ := protowire.ConsumeString(fields[4]); q != "qwen@4g" {
		t.Errorf("queue = %q", q)
	}
	if ty, _ := protowire.ConsumeString(fields[1]); ty != "generate" {
		t.Errorf("type = %q", ty)
	}
	if v, _ := protowire.ConsumeVarint(fields[5]); v != 3 {
		t.Errorf("retry = %d", v)
	}
	for _, bad := range [][]byte{{0x22, 0xff}, {0x22, 0x05, 'a'}, {0x07}, {0x80}} {
		if _, err := SetTaskQueue(bad, "q"); err == nil {
			t.Errorf("%x: no error", bad)
		}
	}
}

func FuzzSetTaskQueue(f *testing.F) {
	f.Add([]byte{0x0a, 0x01, 'g', 0x22, 0x07, 'd', 'e', 'f', 'a', 'u', 'l', 't', 0x28, 0x03}, "q")
	f.Add([]byte{0x22, 0xff}, "q")
	f.Add([]byte{}, "")
	f.Fuzz(func(t *testing.T, msg []byte, q string) {
		out, err := SetTaskQueue(msg, q)
		if err != nil {
			return
		}
		// Idempotent, and the queue is what was set.
		again, err := SetTaskQueue(out, q)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("second rewrite: %x %v, want %x", again, err, out)
		}
		// The type and payload read alike before and after, and an archive's error fields
		// leave them alone.
		typ, payload, err := TaskTypeAndPayload(msg)
		if err != nil {
			t.Fatalf("%x rewrites but does not read: %v", msg, err)
		}
		archived, err := SetTaskFailure(out, q, time.Unix(1<<40, 0))
		if err != nil {
			t.Fatal(err)
		}
		if t2, p2, err := TaskTypeAndPayload(archived); err != nil || t2 != typ || !bytes.Equal(p2, payload) {
			t.Fatalf("after the rewrites: %q %x %v, want %q %x", t2, p2, err, typ, payload)
		}
	})
}
