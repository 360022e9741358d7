package api

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestParseBatchInputLimits(t *testing.T) {
	line := func(i int) string {
		return fmt.Sprintf(`{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{}}`, i)
	}
	var buf bytes.Buffer
	for i := range MaxBatchRequests {
		buf.WriteString(line(i))
		buf.WriteByte('\n')
	}
	lines, errs := ParseBatchInput(buf.Bytes(), chatEndpoint)
	if len(lines) != MaxBatchRequests || len(errs) != 0 {
		t.Fatalf("%d requests: %d lines, errors %v", MaxBatchRequests, len(lines), errs)
	}
	buf.WriteString(line(MaxBatchRequests))
	lines, errs = ParseBatchInput(buf.Bytes(), chatEndpoint)
	if len(lines) != 0 || len(errs) != 1 || errs[0].Code != "too_many_requests" || !strings.Contains(errs[0].Message, "50000") {
		t.Errorf("%d requests: %d lines, errors %v", MaxBatchRequests+1, len(lines), errs)
	}

	// Line numbers count blank lines, and every problem is reported with its own.
	in := line(0) + "\n\n" + line(0) + "\n" + `{"custom_id":"x","method":"POST","url":"/v1/embeddings","body":{}}` + "\n" + `{"custom_id":""}` + "\n"
	_, errs = ParseBatchInput([]byte(in), chatEndpoint)
	want := []struct {
		line int
		code string
	}{{3, "duplicate_custom_id"}, {4, "invalid_url"}, {5, "missing_custom_id"}}
	if len(errs) != len(want) {
		t.Fatalf("errors %+v", errs)
	}
	for i, w := range want {
		if errs[i].Line == nil || *errs[i].Line != w.line || errs[i].Code != w.code {
			t.Errorf("error %d: %+v, want line %d %s", i, errs[i], w.line, w.code)
		}
	}
}
