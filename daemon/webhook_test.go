package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/internal/testlog"
	"github.com/redlite/batch/jobs"
)

type hookCall struct {
	at      time.Time
	attempt int
	ts, sig string
	body    []byte
}

// hookReceiver answers the i-th POST (from 0) with replies[i], 200 after them, and
// reports every call.
func hookReceiver(t *testing.T, replies ...func(w http.ResponseWriter)) (*httptest.Server, chan hookCall) {
	calls := make(chan hookCall, 64)
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		attempt, _ := strconv.Atoi(r.Header.Get(jobs.WebhookHeaderAttempt))
		calls <- hookCall{at: time.Now(), attempt: attempt, ts: r.Header.Get(jobs.WebhookHeaderTimestamp), sig: r.Header.Get(jobs.WebhookHeaderSignature), body: body}
		if n < len(replies) {
			replies[n](w)
		}
		n++
	}))
	t.Cleanup(srv.Close)
	return srv, calls
}

func nextCall(t *testing.T, calls chan hookCall) hookCall {
	t.Helper()
	select {
	case c := <-calls:
		return c
	case <-time.After(waitLimit):
		t.Fatal("no webhook POST")
		return hookCall{}
	}
}

func status(code int, retryAfter string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(code)
	}
}

// waitOutboxEmpty waits until no delivery is queued.
func waitOutboxEmpty(t *testing.T, redisURL string) {
	t.Helper()
	u, _ := redisx.Parse(redisURL)
	rdb := u.AsynqOpt().MakeRedisClient().(redis.UniversalClient)
	defer rdb.Close()
	waitUntil(t, "the webhook outbox is empty", func() bool {
		n, err := rdb.ZCard(context.Background(), keyWebhooksDue).Result()
		return err == nil && n == 0
	})
}

// allowLoopback lets b.client and the daemons started on b.cfg after it reach receivers on
// 127.0.0.1, as an operator does with REDLITE_WEBHOOK_ALLOW=127.0.0.1/32.
func allowLoopback(t *testing.T, b *testBundle) {
	t.Helper()
	cfg, err := ConfigFromEnv([]string{"REDLITE_WEBHOOK_ALLOW=127.0.0.1/32"})
	if err != nil {
		t.Fatal(err)
	}
	b.cfg.WebhookAllow = cfg.WebhookAllow
	client, err := jobs.NewClient(b.cfg.RedisURL, jobs.WithPollInterval(20*time.Millisecond), jobs.WithWebhookAllow(cfg.WebhookAllow))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	b.client = client
}

// mapResolver answers from a table; a name outside it does not exist.
type mapResolver map[string]string

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := m[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

func TestWebhooks(t *testing.T) {
	if testing.Short() {
		t.Skip("webhook deliveries end to end (-short skips it)")
	}
	const secret = "hook-secret"
	t.Run("SignedAndRetried", func(t *testing.T) {
		b := setup(t)
		allowLoopback(t, b)
		b.cfg.WebhookSecret = secret
		b.cfg.WebhookRetryDelay = 20 * time.Millisecond
		reg := prometheus.NewRegistry()
		d, err := New(b.cfg, Options{Logger: testlog.New(t, 0), Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(context.Background()); err != nil {
			d.Shutdown()
			t.Fatal(err)
		}
		t.Cleanup(d.Shutdown)
		srv, calls := hookReceiver(t, status(503, "1"), status(500, ""))
		enqueue(t, b.client, &jobs.Generate{Prompt: "hook", MaxTokens: ptr(2), Common: jobs.Common{IdempotencyKey: "hook-retry", WebhookURL: srv.URL}})
		var got []hookCall
		for i := range 3 {
			c := nextCall(t, calls)
			if c.attempt != i+1 {
				t.Errorf("call %d: attempt header %d", i, c.attempt)
			}
			if err := jobs.VerifyWebhook([]byte(secret), c.ts, c.sig, c.body, time.Now(), 0); err != nil {
				t.Errorf("call %d: %v", i, err)
			}
			got = append(got, c)
		}
		if string(got[0].body) != string(got[2].body) {
			t.Error("a retry sent another body")
		}
		if env, err := jobs.DecodeEnvelope(got[2].body); err != nil || env.Result == nil {
			t.Errorf("body %s: %v", got[2].body, err)
		}
		// Retry-After: 1 holds the second attempt back at least a second (a lower bound the
		// sender guarantees, not a measurement of speed).
		if gap := got[1].at.Sub(got[0].at); gap < time.Second {
			t.Errorf("second attempt %v after the first, Retry-After asked 1s", gap)
		}
		waitOutboxEmpty(t, b.cfg.RedisURL)
		_, metrics := getURL(t, "http://"+d.HTTPAddr()+"/metrics")
		for _, want := range []string{`redlite_webhook_deliveries_total{outcome="error"} 2`, `redlite_webhook_deliveries_total{outcome="ok"} 1`} {
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		// A receiver refuses a forged or replayed delivery.
		if err := jobs.VerifyWebhook([]byte("other"), got[2].ts, got[2].sig, got[2].body, time.Now(), 0); err == nil {
			t.Error("verified with the wrong secret")
		}
		if err := jobs.VerifyWebhook([]byte(secret), got[2].ts, got[2].sig, got[2].body, time.Now().Add(time.Hour), 0); err == nil {
			t.Error("verified an hour-old delivery")
		}
	})

	t.Run("GivesUp", func(t *testing.T) {
		b := setup(t)
		allowLoopback(t, b)
		b.cfg.WebhookRetryDelay = 10 * time.Millisecond
		b.cfg.WebhookRetryFor = 100 * time.Millisecond
		startDaemon(t, b.cfg, Observer{})
		fail := func(w http.ResponseWriter) { w.WriteHeader(500) }
		srv, calls := hookReceiver(t, fail, fail, fail, fail, fail, fail, fail, fail, fail, fail, fail, fail, fail, fail, fail, fail)
		enqueue(t, b.client, &jobs.Generate{Prompt: "hook", MaxTokens: ptr(2), Common: jobs.Common{WebhookURL: srv.URL}})
		nextCall(t, calls)
		waitOutboxEmpty(t, b.cfg.RedisURL)
		if c := nextCallOrNone(calls); c != nil && c.sig != "" {
			t.Error("signed without a secret")
		}
	})

	t.Run("SurvivesRestart", func(t *testing.T) {
		// The first attempt fails and asks for 2 s; the daemon stops; the next daemon makes
		// the delivery.
		b := setup(t)
		allowLoopback(t, b)
		d := startDaemon(t, b.cfg, Observer{})
		srv, calls := hookReceiver(t, status(503, "2"))
		enqueue(t, b.client, &jobs.Generate{Prompt: "hook", MaxTokens: ptr(2), Common: jobs.Common{IdempotencyKey: "hook-restart", WebhookURL: srv.URL}})
		if c := nextCall(t, calls); c.attempt != 1 {
			t.Fatalf("attempt %d", c.attempt)
		}
		d.Shutdown()
		startDaemon(t, b.cfg, Observer{})
		if c := nextCall(t, calls); c.attempt != 2 {
			t.Errorf("after the restart: attempt %d, want 2", c.attempt)
		}
		waitOutboxEmpty(t, b.cfg.RedisURL)
	})
}

// TestWebhookRebinding: a name that resolved to a public address at submit and resolves to
// loopback at delivery is refused when the worker connects, and never retried; the
// receiver on loopback, which would take the POST, gets none.
func TestWebhookRebinding(t *testing.T) {
	b := setup(t)
	srv, calls := hookReceiver(t)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	atSubmit, err := jobs.NewClient(b.cfg.RedisURL, jobs.WithResolver(mapResolver{"hooks.example.com": "93.184.215.14"}))
	if err != nil {
		t.Fatal(err)
	}
	defer atSubmit.Close()
	d, err := New(b.cfg, Options{Logger: testlog.New(t, 0), Registry: prometheus.NewRegistry(), Resolver: mapResolver{"hooks.example.com": "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		d.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(d.Shutdown)
	job := enqueue(t, atSubmit, &jobs.Generate{Prompt: "hook", MaxTokens: ptr(2), Common: jobs.Common{WebhookURL: "http://hooks.example.com:" + port + "/hook"}})
	if _, err := b.client.Wait(context.Background(), job.ID, nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the delivery is refused", func() bool {
		return counterValue(d.m.webhooks.WithLabelValues("refused")) == 1
	})
	waitOutboxEmpty(t, b.cfg.RedisURL)
	if c := nextCallOrNone(calls); c != nil {
		t.Errorf("the receiver on loopback got a POST (attempt %d)", c.attempt)
	}
	if n := counterValue(d.m.webhooks.WithLabelValues("ok")) + counterValue(d.m.webhooks.WithLabelValues("error")); n != 0 {
		t.Errorf("%v attempts beside the refusal", n)
	}
}

func nextCallOrNone(calls chan hookCall) *hookCall {
	select {
	case c := <-calls:
		return &c
	default:
		return nil
	}
}

// TestWebhookIsolation: deliveries are independent. 64 receivers that never answer, and a
// fifth delivery to one of them queued behind four, hold their own slots only: another
// tenant's delivery, due after all of them, arrives while every hanging POST is still in
// flight (a sender that waited for its slowest POST would hold it for
// REDLITE_WEBHOOK_TIMEOUT, here 10 minutes). It logs that delivery's latency, alone and
// beside the hanging ones.
func TestWebhookIsolation(t *testing.T) {
	const hanging, queuedOnOne = 64, 8
	b := setup(t)
	allowLoopback(t, b)
	cfg := b.cfg
	cfg.WebhookTimeout = 10 * time.Minute
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ru, err := cfg.URL()
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := redisx.NewClient(ru)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	s, err := newWebhookSender(rdb, cfg, nil, testlog.New(t, slog.LevelWarn), m)
	if err != nil {
		t.Fatal(err)
	}
	s.start()

	// The hanging receivers report each POST as it arrives and hold it until the test ends.
	release := make(chan struct{})
	arrived := make(chan string, hanging+queuedOnOne)
	var mu sync.Mutex
	inFirst, maxInFirst := 0, 0
	var urls []string
	for i := range hanging {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if i == 0 {
				mu.Lock()
				inFirst++
				maxInFirst = max(maxInFirst, inFirst)
				mu.Unlock()
				defer func() { mu.Lock(); inFirst--; mu.Unlock() }()
			}
			arrived <- r.Header.Get(jobs.WebhookHeaderJobID)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL+"/hook")
	}
	// Cleanups run last first: release the hanging POSTs, then stop the sender, then the
	// receivers.
	t.Cleanup(s.terminate)
	t.Cleanup(func() { close(release) })

	good, calls := hookReceiver(t)
	deliver := func(id string) time.Duration {
		t.Helper()
		start := time.Now()
		if err := s.add(context.Background(), good.URL+"/hook", id, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		c := nextCall(t, calls)
		return c.at.Sub(start)
	}
	alone := deliver("alone")

	for i, u := range urls {
		if err := s.add(context.Background(), u, "hang-"+strconv.Itoa(i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range queuedOnOne - 1 {
		if err := s.add(context.Background(), urls[0], "queued-"+strconv.Itoa(i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	// Every hanging receiver has a POST in flight, the first webhookPerDestination.
	want := hanging - 1 + webhookPerDestination
	for range want {
		select {
		case <-arrived:
		case <-time.After(waitLimit):
			t.Fatalf("fewer than %d hanging POSTs in flight", want)
		}
	}
	beside := deliver("beside")
	if n := len(arrived); n != 0 {
		t.Errorf("%d more POSTs reached the hanging receivers than their slots", n)
	}
	mu.Lock()
	if maxInFirst != webhookPerDestination {
		t.Errorf("the receiver with %d deliveries had %d POSTs in flight at once, want %d", queuedOnOne, maxInFirst, webhookPerDestination)
	}
	mu.Unlock()
	waitUntil(t, "the second delivery is recorded", func() bool { return counterValue(m.webhooks.WithLabelValues("ok")) == 2 })
	if n := len(arrived); n != 0 {
		t.Errorf("a hanging receiver got %d more POSTs", n)
	}
	t.Logf("another tenant's delivery: %v alone, %v beside %d hanging receivers", alone, beside, hanging)
}
