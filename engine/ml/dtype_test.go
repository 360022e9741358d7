package ml

import (
	"encoding/json"
	"testing"
)

// TestDTypeText: precisions travel by name in plans, capabilities and calibration files.
func TestDTypeText(t *testing.T) {
	for _, d := range []DType{F32, F16} {
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
	if _, err := json.Marshal(DType(7)); err == nil {
		t.Error("dtype 7 marshalled")
	}
}
