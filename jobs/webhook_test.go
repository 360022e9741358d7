package jobs

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestVerifyWebhook(t *testing.T) {
	secret, body := []byte("s"), []byte(`{"type":"result"}`)
	at := time.Unix(1_800_000_000, 0)
	ts := strconv.FormatInt(at.Unix(), 10)
	sig := SignWebhook(secret, at, body)
	if err := VerifyWebhook(secret, ts, sig, body, at.Add(time.Minute), 0); err != nil {
		t.Fatalf("a good delivery: %v", err)
	}
	for _, c := range []struct {
		name          string
		secret        string
		ts, sig, body string
		now           time.Time
	}{
		{"WrongSecret", "x", ts, sig, string(body), at},
		{"ChangedBody", "s", ts, sig, `{"type":"result "}`, at},
		{"ChangedTimestamp", "s", strconv.FormatInt(at.Unix()+1, 10), sig, string(body), at},
		{"Replayed", "s", ts, sig, string(body), at.Add(DefaultWebhookWindow + time.Second)},
		{"FromTheFuture", "s", ts, sig, string(body), at.Add(-DefaultWebhookWindow - time.Second)},
		{"NotHex", "s", ts, "v1=zz", string(body), at},
		{"NoScheme", "s", ts, sig[3:], string(body), at},
		{"BadTimestamp", "s", "yesterday", sig, string(body), at},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := VerifyWebhook([]byte(c.secret), c.ts, c.sig, []byte(c.body), c.now, 0)
			if !errors.Is(err, ErrWebhookSignature) {
				t.Errorf("got %v, want ErrWebhookSignature", err)
			}
		})
	}
}

// FuzzVerifyWebhook feeds received headers and bodies to the verifier: it never panics, and
// accepts only what SignWebhook signed.
func FuzzVerifyWebhook(f *testing.F) {
	at := time.Unix(1_800_000_000, 0)
	f.Add("1800000000", SignWebhook([]byte("k"), at, []byte("{}")), []byte("{}"))
	f.Add("-1", "v1=", []byte(""))
	f.Add("99999999999999999999", "v1=00", []byte("x"))
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		err := VerifyWebhook([]byte("k"), ts, sig, body, at, 0)
		if err == nil {
			sec, _ := strconv.ParseInt(ts, 10, 64)
			// Hex digits may come in either case.
			if want := SignWebhook([]byte("k"), time.Unix(sec, 0), body); !strings.EqualFold(sig, want) {
				t.Fatalf("accepted %q for %q", sig, body)
			}
		}
	})
}
