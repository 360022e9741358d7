package jobs

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Webhook headers. A worker POSTs a finished job's result envelope to its webhook_url with
// these; with a secret configured (REDLITE_WEBHOOK_SECRET) the POST is signed.
const (
	WebhookHeaderJobID   = "Redlite-Job-Id"
	WebhookHeaderAttempt = "Redlite-Delivery-Attempt" // 1 for the first try, 2 for the first retry, …
	// WebhookHeaderTimestamp is when this attempt was signed, in Unix seconds.
	WebhookHeaderTimestamp = "Redlite-Timestamp"
	// WebhookHeaderSignature is "v1=" and the hex HMAC-SHA256, keyed with the secret, of
	// the timestamp header's value, a ".", and the body.
	WebhookHeaderSignature = "Redlite-Signature"
)

// DefaultWebhookWindow is how far a receiver should accept a webhook's timestamp from its
// own clock: long enough for clock skew and a slow network, short enough that a recorded
// delivery cannot be replayed later.
const DefaultWebhookWindow = 5 * time.Minute

// WebhookEnv is the webhook environment workers, the API and the CLI share (embed it in a
// configuration read with caarlos0/env).
type WebhookEnv struct {
	// WebhookSecret signs webhook POSTs (HMAC-SHA256, see VerifyWebhook); WebhookSecretFile
	// reads it from a file instead (trailing newline dropped). With neither, webhooks are
	// sent unsigned. The API tells each token the secret its jobs' webhooks are signed with.
	WebhookSecret     string `env:"REDLITE_WEBHOOK_SECRET"`
	WebhookSecretFile string `env:"REDLITE_WEBHOOK_SECRET_FILE"`
	// WebhookAllow lists the receivers on internal addresses (loopback, private,
	// link-local, …) that webhooks may reach: CIDRs, addresses and host names,
	// comma-separated. Empty (the default) allows public addresses only; a webhook_url on
	// another address is refused at submit. Workers, the API and clients need the same list.
	WebhookAllow WebhookAllow `env:"REDLITE_WEBHOOK_ALLOW"`
}

// Secret is the signing secret of REDLITE_WEBHOOK_SECRET or REDLITE_WEBHOOK_SECRET_FILE.
func (e WebhookEnv) Secret() ([]byte, error) {
	return WebhookSecret(e.WebhookSecret, e.WebhookSecretFile)
}

// WebhookSecret reads the signing secret the way workers and the API both do: value
// (REDLITE_WEBHOOK_SECRET), or the contents of file (REDLITE_WEBHOOK_SECRET_FILE) without a
// trailing newline; not both. Empty means unsigned webhooks.
func WebhookSecret(value, file string) ([]byte, error) {
	switch {
	case file == "":
		return []byte(value), nil
	case value != "":
		return nil, errors.New("REDLITE_WEBHOOK_SECRET_FILE: set either it or REDLITE_WEBHOOK_SECRET, not both")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("REDLITE_WEBHOOK_SECRET_FILE: %w", err)
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) == 0 {
		return nil, fmt.Errorf("REDLITE_WEBHOOK_SECRET_FILE: %s is empty", file)
	}
	return b, nil
}

// JobOwnerKey is the Redis key (a string) where redlite-api records which token submitted
// a job: the first 16 hex digits of the token's SHA-256. Workers read it to sign the job's
// webhook with that token's secret.
func JobOwnerKey(id string) string { return "redlite:api:job:" + id + ":owner" }

// TokenWebhookSecret is the secret that signs the webhooks of one token's jobs, derived
// from the configured secret (REDLITE_WEBHOOK_SECRET), so that each token's holder can
// verify its own deliveries and forge no one else's. It is hex text, to be copied as is.
func TokenWebhookSecret(secret []byte, owner string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("redlite-webhook-token:" + owner))
	return []byte(hex.EncodeToString(m.Sum(nil)))
}

// ErrWebhookSignature: a webhook's signature or timestamp does not check out.
var ErrWebhookSignature = errors.New("webhook signature invalid")

// SignWebhook returns the WebhookHeaderSignature value for body sent at ts.
func SignWebhook(secret []byte, ts time.Time, body []byte) string {
	return "v1=" + hex.EncodeToString(webhookMAC(secret, strconv.FormatInt(ts.Unix(), 10), body))
}

func webhookMAC(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// VerifyWebhook checks a received webhook: the signature over the timestamp and body, in
// constant time, and that the timestamp is within window of now (DefaultWebhookWindow when
// zero), which refuses replays of old deliveries. Errors match ErrWebhookSignature.
func VerifyWebhook(secret []byte, timestamp, signature string, body []byte, now time.Time, window time.Duration) error {
	if window <= 0 {
		window = DefaultWebhookWindow
	}
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not Unix seconds", ErrWebhookSignature, WebhookHeaderTimestamp, timestamp)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > window || d < -window {
		return fmt.Errorf("%w: timestamp is %v away from now, outside the window of %v", ErrWebhookSignature, d.Round(time.Second), window)
	}
	got, ok := strings.CutPrefix(signature, "v1=")
	sig, err := hex.DecodeString(got)
	if !ok || err != nil {
		return fmt.Errorf("%w: %s must be v1= and hex digits", ErrWebhookSignature, WebhookHeaderSignature)
	}
	if !hmac.Equal(sig, webhookMAC(secret, timestamp, body)) {
		return fmt.Errorf("%w: the signature does not match the body (wrong secret, or the body was changed)", ErrWebhookSignature)
	}
	return nil
}
