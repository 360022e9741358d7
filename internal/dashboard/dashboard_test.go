package dashboard

import (
	"strings"
	"testing"

	"github.com/redlite/batch/jobs"
)

func TestFormatPayload(t *testing.T) {
	long := strings.Repeat("é", dashboardTextLimit) // 2 bytes each: cut inside the text
	got := FormatPayload([]byte(`{"version":1,"input":"` + long + `","max_tokens":12}`))
	if !strings.Contains(got, "\n  \"max_tokens\": 12") || !strings.Contains(got, "… (4000 bytes in all)") || len(got) > dashboardTextLimit+200 {
		t.Errorf("formatted payload:\n%.300s", got)
	}
	env := jobs.EncodeProgress(jobs.Progress{Phase: jobs.PhaseDecode, Generated: 3})
	if got := FormatPayload(env); !strings.Contains(got, "\"phase\": \"decode\"") {
		t.Errorf("formatted progress:\n%s", got)
	}
	if got := FormatPayload([]byte("not json")); got != "not json" {
		t.Errorf("non-JSON: %q", got)
	}
	if got := FormatPayload([]byte{0xff, 0xfe}); got != "non-printable bytes" {
		t.Errorf("binary: %q", got)
	}
}
