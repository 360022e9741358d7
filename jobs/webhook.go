package jobs

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
