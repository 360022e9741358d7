package api_test

import (
	"net/http"
	"testing"

	"github.com/redlite/batch/api"
	"github.com/redlite/batch/jobs"
)

// testWebhookAllow is the tests' REDLITE_WEBHOOK_ALLOW: their receivers are on 127.0.0.1.
func testWebhookAllow(t *testing.T) jobs.WebhookAllow {
	t.Helper()
	a, err := jobs.ParseWebhookAllow("127.0.0.1/32")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestWebhookURLRefused: a webhook_url that names an internal address is a 400 naming the
// field, and enqueues nothing. (TestWebhookPerToken delivers to the allowlisted 127.0.0.1.)
func TestWebhookURLRefused(t *testing.T) {
	b := setup(t, setupOpts{noDaemon: true, config: func(c *api.Config) { c.WebhookAllow = testWebhookAllow(t) }})
	for _, c := range []struct{ url, says string }{
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"http://metadata.google.internal/", "metadata"},
		{"http://10.0.0.1/", "private"},
		{"http://192.168.0.1/", "private"},
		{"http://localhost:6379/", "loopback"},
		{"http://[::1]:6379/", "loopback"},
		{"http://127.0.0.2:6379/", "loopback"}, // outside the allowlist's 127.0.0.1/32
		{"http://0.0.0.0/", "unspecified"},
		{"http://2130706433/", "dotted-decimal"},
		{"http://user:pw@example.com/", "credentials"},
	} {
		code, data := b.call(t, tokenA, "POST", "/v1/jobs", generate(2, "webhook_url", c.url))
		wantError(t, c.url, code, data, http.StatusBadRequest, "invalid_payload", c.says)
	}
	if n := b.rdb.Keys(t.Context(), "asynq:{*}:t:*").Val(); len(n) != 0 {
		t.Errorf("refused jobs were enqueued: %v", n)
	}
}
