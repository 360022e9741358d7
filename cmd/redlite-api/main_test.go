package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	for _, c := range []struct {
		args, env []string
		code      int
		want      string
	}{
		{[]string{"--version"}, nil, 0, "redlite-api"},
		{[]string{"serve"}, nil, 2, "usage: redlite-api"},
		{nil, nil, 2, "invalid configuration: REDLITE_API_TOKENS, REDLITE_API_TOKENS_FILE: no tokens"},
		{nil, []string{"REDLITE_API_TOKENS=t", "REDLITE_API_MAX_BODY_BYTES=lots"}, 2, "REDLITE_API_MAX_BODY_BYTES"},
		{nil, []string{"REDLITE_API_TOKENS=t", "REDLITE_LOG_LEVEL=loud"}, 2, "REDLITE_LOG_LEVEL"},
		{nil, []string{"REDLITE_API_TOKENS=t", "REDLITE_WEBHOOK_ALLOW=localhost,10.0.0.0/40"}, 2, "REDLITE_WEBHOOK_ALLOW"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, c.env, &out, &errb)
		if code != c.code || !strings.Contains(out.String()+errb.String(), c.want) {
			t.Errorf("run(%q, %q) = %d, %q %q; want %d and %q", c.args, c.env, code, out.String(), errb.String(), c.code, c.want)
		}
	}
}
