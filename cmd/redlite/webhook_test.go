package main

import (
	"strings"
	"testing"
)

// TestEnqueueWebhookRefused: an internal webhook_url is a payload error (exit 2) unless
// REDLITE_WEBHOOK_ALLOW lists it.
func TestEnqueueWebhookRefused(t *testing.T) {
	url := jobsSetup(t, false)
	for _, c := range []struct{ hook, says string }{
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"http://127.0.0.1:6379/", "loopback"},
		{"http://0x7f000001/", "dotted-decimal"},
		{"http://user:pw@example.com/", "credentials"},
	} {
		code, _, errs := runCmd(t, "enqueue", "generate", "--redis", url, "--prompt", "x", "--anyway", "--webhook-url", c.hook)
		if code != 2 || !strings.Contains(errs, "webhook_url") || !strings.Contains(errs, c.says) {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 saying %q", c.hook, code, errs, c.says)
		}
	}
	t.Setenv("REDLITE_WEBHOOK_ALLOW", "127.0.0.1/32")
	if code, _, errs := runCmd(t, "enqueue", "generate", "--redis", url, "--prompt", "x", "--anyway", "--webhook-url", "http://127.0.0.1:6379/"); code != 0 {
		t.Errorf("allowlisted: exit %d, %s", code, errs)
	}
}

// TestBadWebhookAllow: a REDLITE_WEBHOOK_ALLOW that does not parse is a bad setting: exit 2
// naming it, before anything is enqueued.
func TestBadWebhookAllow(t *testing.T) {
	url := jobsSetup(t, false)
	t.Setenv("REDLITE_WEBHOOK_ALLOW", "10.0.0.0/40")
	code, _, errs := runCmd(t, "enqueue", "generate", "--redis", url, "--prompt", "x", "--anyway")
	if code != 2 || !strings.Contains(errs, `REDLITE_WEBHOOK_ALLOW`) || !strings.Contains(errs, `"10.0.0.0/40" is not a CIDR`) {
		t.Errorf("exit %d, stderr %q; want exit 2 naming REDLITE_WEBHOOK_ALLOW", code, errs)
	}
}
