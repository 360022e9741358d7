package device

import (
	"errors"
	"testing"
)

func TestRecorderCounts(t *testing.T) {
	r := NewRecorder("kernel void add_f32(device float *x [[buffer(1)]]) {}\n  kernel void mul_f32(\n")
	if _, err := r.Pipeline("nope"); err == nil {
		t.Fatal("an unknown kernel got a pipeline")
	}
	p, err := r.Pipeline("add_f32")
	if err != nil {
		t.Fatal(err)
	}
	buf, _ := r.NewBuffer(64)
	c := r.NewCommands()
	for range 3 {
		c.Encode(Dispatch{Pipeline: p, Buffers: []BufferArg{{Index: 1, Buffer: buf}}, Cost: Cost{Label: "add", Read: 10, Written: 4, FLOPs: 2}})
	}
	c.Commit()
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	got := r.Counts()
	if len(got) != 1 || got[0] != (Count{Label: "add", Dispatches: 3, Read: 30, Written: 12, FLOPs: 6}) {
		t.Errorf("counts %+v", got)
	}
	c.Encode(Dispatch{Pipeline: p})
	var de *Error
	if err := c.Wait(); !errors.As(err, &de) {
		t.Errorf("encoding after commit: %v, want a device error", err)
	}
	if err := buf.Read(60, make([]byte, 8)); err == nil {
		t.Error("a read past the buffer's end succeeded")
	}
	r.Reset()
	if len(r.Counts()) != 0 {
		t.Error("Reset kept counts")
	}
}
