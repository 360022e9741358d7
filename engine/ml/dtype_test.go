package ml

import (
	"encoding/json"
	"testing"
)

// TestDTypeText: precisions travel by name in plans, capabilities and calibration files.
func TestDTypeText(t *testing.T) {
	for _, d := range []DType{F32, F16, Q8_0} {
		b, err := json.Marshal(d)
		if err != nil || string(b) != `"`+d.String()+`"` {
			t.Fatalf("%v: %s %v", d, b, err)
		}
		var back DType = 7
		if err := json.Unmarshal(b, &back); err != nil || back != d {
			t.Fatalf("%s: %v %v", b, back, err)
		}
	}
	var d DType
	if err := json.Unmarshal([]byte(`"q8"`), &d); err == nil {
		t.Error(`"q8" unmarshalled`)
	}
	if err := json.Unmarshal([]byte(`"q4_0"`), &d); err == nil {
		t.Error(`"q4_0" unmarshalled`)
	}
	if _, err := json.Marshal(DType(7)); err == nil {
		t.Error("dtype 7 marshalled")
	}
}

// TestRowBytes: Q8_0 is 34 bytes per 32 values; heads that are not whole blocks do not fit.
func TestRowBytes(t *testing.T) {
	for _, c := range []struct {
		d    DType
		n    int
		want int64
	}{{F32, 64, 256}, {F16, 64, 128}, {Q8_0, 64, 68}, {Q8_0, 256, 272}} {
		if got := c.d.RowBytes(c.n); got != c.want {
			t.Errorf("%v.RowBytes(%d) = %d, want %d", c.d, c.n, got, c.want)
		}
	}
	if Q8_0.RowFits(80) || !Q8_0.RowFits(96) || !F16.RowFits(80) {
		t.Error("RowFits: want q8_0 to need whole blocks of 32 and f16 to take any length")
	}
	if got := KVBytesPerPosition(2, 2, 64, 64, Q8_0); got != 2*2*(68+68) {
		t.Errorf("KVBytesPerPosition q8_0 = %d, want %d", got, 2*2*(68+68))
	}
}
