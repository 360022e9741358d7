package daemon

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// postWebhook POSTs a completed job's result envelope to the payload's webhook_url, once,
// within REDLITE_WEBHOOK_TIMEOUT. A failed delivery is logged and counted but does not fail
// the job: the result is in Redis either way, and a retry of the whole job to repeat a POST
// would run the model again.
func (w *worker) postWebhook(ctx context.Context, log *slog.Logger, url, id string, env []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.WebhookTimeout)
	defer cancel()
	err := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(env))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "redlited")
		req.Header.Set("Redlite-Job-Id", id)
		resp, err := webhookClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	}()
	if err != nil {
		w.m.webhooks.WithLabelValues("error").Inc()
		// The URL may carry a token; log only that a delivery failed.
		log.Warn("webhook delivery failed", "err", redactURLError(err))
		return
	}
	w.m.webhooks.WithLabelValues("ok").Inc()
}

// webhookClient does not follow redirects: a result goes where the client said, nowhere else.
var webhookClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Transport:     &http.Transport{Proxy: http.ProxyFromEnvironment, ResponseHeaderTimeout: 30 * time.Second},
}

// redactURLError drops the URL that net/http puts in its errors.
func redactURLError(err error) error {
	type unwrapper interface{ Unwrap() error }
	if u, ok := err.(unwrapper); ok && u.Unwrap() != nil {
		return u.Unwrap()
	}
	return err
}
