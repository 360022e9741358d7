package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/jobs"
)

// Webhook deliveries wait in Redis, not in memory, so that one survives the worker that
// queued it: a sorted set of delivery ids by when they are due, and a hash per delivery.
// Every daemon's sender takes due deliveries from the set, so a delivery whose worker is
// gone is made by another. Delivery is at least once: a sender that dies between the POST
// and recording it leaves the delivery to be made again after its lease.
const (
	keyWebhooksDue = "redlite:webhooks:due"
	// webhookInFlight is how many POSTs one sender has in flight at most. Deliveries are
	// independent: a slot is taken back as soon as its POST ends, and a POST waits on the
	// network, not on a core, so the limit is high; it bounds memory (each holds a result).
	webhookInFlight = 512
	// webhookPerDestination is how many POSTs one sender has in flight to one receiver
	// (scheme, host and port): a hanging receiver holds that many slots and delays only its
	// own deliveries, however many it has due.
	webhookPerDestination = 4
	// webhookScan is how many due deliveries one claim looks through at most for ones
	// whose receiver has a free slot.
	webhookScan = 16384
	// webhookMaxDelay caps the back-off between two attempts (a Retry-After may ask more,
	// within REDLITE_WEBHOOK_RETRY_FOR).
	webhookMaxDelay = 5 * time.Minute
	// webhookTick is how often a sender looks for due deliveries it was not told of: a
	// retry that comes due, or another worker's.
	webhookTick = time.Second
)

func keyWebhook(id string) string { return "redlite:webhook:" + id }

// webhookSender delivers results to webhook_url: signed, retried with back-off (or after
// the receiver's Retry-After) for REDLITE_WEBHOOK_RETRY_FOR, each attempt counted.
type webhookSender struct {
	rdb    redis.UniversalClient
	cfg    Config
	secret []byte
	log    *slog.Logger
	m      *metrics
	client *http.Client
	kickc  chan struct{}
	// mu guards busy, the POSTs in flight by destination, and inFlight, their sum;
	// wg counts them.
	mu       sync.Mutex
	busy     map[string]int
	inFlight int
	wg       sync.WaitGroup
	// dests remembers the destination of the due deliveries seen, so that a claim reads
	// from Redis only the URLs of new ones: while receivers hang, deliveries wait due and
	// every claim looks through them. Only the loop's goroutine uses it.
	dests  map[string]string
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func newWebhookSender(rdb redis.UniversalClient, cfg Config, r jobs.Resolver, log *slog.Logger, m *metrics) (*webhookSender, error) {
	secret, err := cfg.Secret()
	if err != nil {
		return nil, configErr(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &webhookSender{rdb: rdb, cfg: cfg, secret: secret, log: log, m: m, client: webhookClient(cfg.WebhookAllow, r), kickc: make(chan struct{}, 1),
		busy: map[string]int{}, dests: map[string]string{},
		ctx: ctx, cancel: cancel, done: make(chan struct{})}, nil
}

// add queues the delivery of a finished job's result envelope and wakes the sender.
func (s *webhookSender) add(ctx context.Context, url, id string, env []byte) error {
	now := time.Now()
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, keyWebhook(id), "url", url, "body", env, "attempts", 0, "first", now.UnixMilli())
		p.ZAdd(ctx, keyWebhooksDue, redis.Z{Score: float64(now.UnixMilli()), Member: id})
		return nil
	})
	if err != nil {
		return fmt.Errorf("queue webhook of job %s: %w", id, err)
	}
	s.kick()
	return nil
}

// kick wakes the sender's loop.
func (s *webhookSender) kick() {
	select {
	case s.kickc <- struct{}{}:
	default:
	}
}

func (s *webhookSender) start() {
	go func() {
		defer close(s.done)
		tick := time.NewTicker(webhookTick)
		defer tick.Stop()
		for {
			s.claim()
			select {
			case <-s.ctx.Done():
				return
			case <-tick.C:
			case <-s.kickc:
			}
		}
	}()
}

// terminate stops the sender after the POSTs in flight (each bounded by
// REDLITE_WEBHOOK_TIMEOUT); what is left waits in Redis for another sender or the next start.
func (s *webhookSender) terminate() {
	s.cancel()
	<-s.done
	s.wg.Wait()
}

// claimScript leases, until ARGV[2], those of the deliveries ARGV[3:] still due by ARGV[1]
// (ms), and returns them: another sender sees them again only if this one dies before it
// records them, and of two senders that chose the same delivery one gets it.
var claimScript = redis.NewScript(`
local out = {}
for i = 3, #ARGV do
  local due = redis.call("ZSCORE", KEYS[1], ARGV[i])
  if due and tonumber(due) <= tonumber(ARGV[1]) then
    redis.call("ZADD", KEYS[1], ARGV[2], ARGV[i])
    out[#out + 1] = ARGV[i]
  end
end
return out`)

// claim starts the due deliveries whose receivers have a free slot, in due order, while
// the sender has slots free. It does not wait for them: each POST ends on its own and
// kicks the loop to fill its slot (a pool, not a batch that waits for its slowest).
func (s *webhookSender) claim() {
	now := time.Now()
	s.mu.Lock()
	free := webhookInFlight - s.inFlight
	s.mu.Unlock()
	if free <= 0 {
		return
	}
	due, err := s.rdb.ZRangeByScore(s.ctx, keyWebhooksDue, &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: webhookScan}).Result()
	if err != nil || len(due) == 0 {
		if err != nil && s.ctx.Err() == nil {
			s.log.Warn("claim webhook deliveries", "err", err)
		}
		return
	}
	if err := s.learnDestinations(due); err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("claim webhook deliveries", "err", err)
		}
		return
	}
	// Choose, reserving slots as we go.
	dest := map[string]string{}
	var chosen []any
	s.mu.Lock()
	for _, id := range due {
		if len(chosen) == free {
			break
		}
		d := s.dests[id] // "" for a delivery without its hash: deliver drops it
		if s.busy[d] >= webhookPerDestination {
			continue
		}
		s.busy[d]++
		s.inFlight++
		dest[id] = d
		chosen = append(chosen, id)
	}
	s.mu.Unlock()
	if len(chosen) == 0 {
		return
	}
	lease := now.Add(s.cfg.WebhookTimeout + 10*time.Second)
	args := append([]any{now.UnixMilli(), lease.UnixMilli()}, chosen...)
	got, err := claimScript.Run(s.ctx, s.rdb, []string{keyWebhooksDue}, args...).StringSlice()
	if err != nil && s.ctx.Err() == nil {
		s.log.Warn("claim webhook deliveries", "err", err)
	}
	for _, id := range got {
		d := dest[id]
		delete(dest, id)
		delete(s.dests, id) // done with, or due again later under the same URL
		s.wg.Add(1)
		go func() {
			defer s.release(d)
			s.deliver(id)
		}()
	}
	// What another sender took meanwhile, or the claim failed on, frees its slot.
	s.mu.Lock()
	for _, d := range dest {
		s.releaseLocked(d)
	}
	s.mu.Unlock()
}

// learnDestinations reads the URLs of the due deliveries that s.dests does not know yet.
func (s *webhookSender) learnDestinations(due []string) error {
	if len(s.dests) > 2*webhookScan {
		clear(s.dests) // ids delivered by other senders; read again what is still due
	}
	var unknown []string
	for _, id := range due {
		if _, ok := s.dests[id]; !ok {
			unknown = append(unknown, id)
		}
	}
	urls := make([]*redis.StringCmd, len(unknown))
	if _, err := s.rdb.Pipelined(s.ctx, func(p redis.Pipeliner) error {
		for i, id := range unknown {
			urls[i] = p.HGet(s.ctx, keyWebhook(id), "url")
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i, id := range unknown {
		if u := urls[i].Val(); u != "" {
			s.dests[id] = webhookDestination(u)
		}
	}
	return nil
}

// release frees a delivery's slot and wakes the loop to fill it.
func (s *webhookSender) release(d string) {
	s.mu.Lock()
	s.releaseLocked(d)
	s.mu.Unlock()
	s.wg.Done()
	s.kick()
}

func (s *webhookSender) releaseLocked(d string) {
	s.inFlight--
	if s.busy[d]--; s.busy[d] <= 0 {
		delete(s.busy, d)
	}
}

// webhookDestination is the receiver a URL names, as the per-destination limit counts
// them: scheme, host and port, in lower case.
func webhookDestination(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// deliver makes one attempt and records its outcome. It uses a context apart from the
// sender's: a POST under way when the daemon stops is finished and recorded.
func (s *webhookSender) deliver(id string) {
	ctx := context.WithoutCancel(s.ctx)
	h, err := s.rdb.HGetAll(ctx, keyWebhook(id)).Result()
	if err != nil {
		s.log.Warn("read webhook delivery", "job", id, "err", err)
		return // leased: tried again later
	}
	if len(h) == 0 {
		s.rdb.ZRem(ctx, keyWebhooksDue, id)
		return
	}
	attempts, _ := strconv.Atoi(h["attempts"])
	attempts++
	first, _ := strconv.ParseInt(h["first"], 10, 64)
	log := s.log.With("job", id, "attempt", attempts)
	secret := s.secret
	if len(secret) > 0 {
		// A job submitted through redlite-api is signed with its token's secret.
		if owner, err := s.rdb.Get(ctx, jobs.JobOwnerKey(id)).Result(); err == nil && owner != "" {
			secret = jobs.TokenWebhookSecret(secret, owner)
		}
	}
	retryAfter, err := s.post(ctx, h["url"], id, attempts, secret, []byte(h["body"]))
	if errors.Is(err, jobs.ErrWebhookAddress) {
		// The host is, or now resolves to, an address webhooks may not reach: no retry
		// would change that but the operator's REDLITE_WEBHOOK_ALLOW.
		s.m.webhooks.WithLabelValues("refused").Inc()
		log.Warn("webhook delivery refused; giving up", "err", redactURLError(err))
		s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, keyWebhooksDue, id)
			p.Del(ctx, keyWebhook(id))
			return nil
		})
		return
	}
	if err == nil {
		s.m.webhooks.WithLabelValues("ok").Inc()
		s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, keyWebhooksDue, id)
			p.Del(ctx, keyWebhook(id))
			return nil
		})
		return
	}
	s.m.webhooks.WithLabelValues("error").Inc()
	// The URL may carry a token; log only that a delivery failed.
	delay := min(s.cfg.WebhookRetryDelay<<min(attempts-1, 20), webhookMaxDelay)
	delay = max(delay, retryAfter)
	next := time.Now().Add(delay)
	if next.Sub(time.UnixMilli(first)) > s.cfg.WebhookRetryFor {
		s.m.webhooks.WithLabelValues("expired").Inc()
		log.Warn("webhook delivery failed; giving up (REDLITE_WEBHOOK_RETRY_FOR)", "err", redactURLError(err), "retry_for", s.cfg.WebhookRetryFor)
		s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, keyWebhooksDue, id)
			p.Del(ctx, keyWebhook(id))
			return nil
		})
		return
	}
	log.Warn("webhook delivery failed; will retry", "err", redactURLError(err), "in", delay.Round(time.Millisecond))
	s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, keyWebhook(id), "attempts", attempts)
		p.ZAdd(ctx, keyWebhooksDue, redis.Z{Score: float64(next.UnixMilli()), Member: id})
		return nil
	})
}

// post makes one POST within REDLITE_WEBHOOK_TIMEOUT. On failure it returns the delay the
// receiver asked for with Retry-After, if any.
func (s *webhookSender) post(ctx context.Context, url, id string, attempt int, secret, body []byte) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "redlited")
	req.Header.Set(jobs.WebhookHeaderJobID, id)
	req.Header.Set(jobs.WebhookHeaderAttempt, strconv.Itoa(attempt))
	if len(secret) > 0 {
		now := time.Now()
		req.Header.Set(jobs.WebhookHeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(jobs.WebhookHeaderSignature, jobs.SignWebhook(secret, now, body))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return retryAfter(resp.Header.Get("Retry-After"), time.Now()), fmt.Errorf("status %s", resp.Status)
	}
	return 0, nil
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// postWebhook queues the delivery of a completed job's result to the payload's
// webhook_url. A delivery that cannot be queued is logged and counted but does not fail the
// job: the result is in Redis either way, and a retry of the whole job to repeat a POST
// would run the model again.
func (w *worker) postWebhook(ctx context.Context, log *slog.Logger, url, id string, env []byte) {
	if err := w.hooks.add(context.WithoutCancel(ctx), url, id, env); err != nil {
		w.m.webhooks.WithLabelValues("error").Inc()
		log.Warn("webhook delivery not queued", "err", err)
	}
}

// webhookClient connects only to addresses that allow permits (jobs.WebhookAllow.DialContext),
// through no proxy (the check must see the receiver's address, not a proxy's), and does not
// follow redirects: a result goes where the client said, nowhere else.
func webhookClient(allow jobs.WebhookAllow, r jobs.Resolver) *http.Client {
	return &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			DialContext:           allow.DialContext(r, net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}),
			ResponseHeaderTimeout: 30 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			MaxIdleConnsPerHost:   webhookPerDestination,
			IdleConnTimeout:       90 * time.Second,
		},
	}
}

// redactURLError drops the URL that net/http puts in its errors.
func redactURLError(err error) error {
	type unwrapper interface{ Unwrap() error }
	if u, ok := err.(unwrapper); ok && u.Unwrap() != nil {
		return u.Unwrap()
	}
	return err
}
