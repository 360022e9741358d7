package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/api"
	"github.com/redlite/batch/daemon"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/internal/testlog"
	"github.com/redlite/batch/jobs"
)

// waitLimit bounds every wait for an event; nothing waits by sleeping.
const waitLimit = 60 * time.Second

const (
	tokenA = "test-token-a"
	tokenB = "test-token-b"
)

// TestMain lets the test binary run as redlite-api, configured by the environment, so that
// a test can kill -9 a real API process.
func TestMain(m *testing.M) {
	if os.Getenv("REDLITE_TEST_AS_API") == "1" {
		cfg, err := api.ConfigFromEnv(os.Environ())
		if err != nil {
			fmt.Fprintln(os.Stderr, "redlite-api:", err)
			os.Exit(2)
		}
		if err := api.Run(context.Background(), cfg, api.Options{}); err != nil {
			fmt.Fprintln(os.Stderr, "redlite-api:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type bundle struct {
	redis  *redistest.Server
	rdb    *redis.Client
	api    *api.Server
	base   string
	daemon *daemon.Daemon
	dcfg   daemon.Config
	cfg    api.Config
}

type setupOpts struct {
	noDaemon bool
	config   func(*api.Config)
	// webhookSecret is REDLITE_WEBHOOK_SECRET of the daemon and the API.
	webhookSecret string
	// redis is the Redis to use, started with options of the test's; nil starts one.
	redis *redistest.Server
}

// setup starts a Redis, a real daemon on the tiny fixture model (unless noDaemon) and an API
// server on a loopback port.
func setup(t *testing.T, o setupOpts) *bundle {
	t.Helper()
	r := o.redis
	if r == nil {
		r = redistest.Start(t)
	}
	b := &bundle{redis: r}
	b.rdb = redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { b.rdb.Close() })
	if !o.noDaemon {
		b.startDaemon(t, o.webhookSecret)
	}
	cfg, err := api.ConfigFromEnv([]string{
		"REDLITE_REDIS_URL=" + r.URL(0),
		"REDLITE_API_ADDR=127.0.0.1:0",
		"REDLITE_API_TOKENS=" + tokenA + "," + tokenB,
		"REDLITE_API_BATCH_INTERVAL=50ms",
		"REDLITE_API_POLL_INTERVAL=20ms",
		"REDLITE_API_RATE_LIMIT=0",
		"REDLITE_LOG_LEVEL=debug",
		"REDLITE_WEBHOOK_ALLOW=127.0.0.1/32", // the tests' receivers
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.WebhookSecret = o.webhookSecret
	if o.config != nil {
		o.config(&cfg)
	}
	b.cfg = cfg
	b.startAPI(t)
	return b
}

func (b *bundle) startDaemon(t *testing.T, webhookSecret string) {
	t.Helper()
	cfg := daemon.DefaultConfig()
	cfg.RedisURL = b.redis.URL(0)
	cfg.Model = fixtures.Path(t, "models", "tiny-qwen3-Q8_0.gguf")
	cfg.HTTPAddr = "off"
	cfg.WorkerName = "test-worker"
	cfg.GPULimitMiB = 4096
	cfg.MaxChunk = 512
	cfg.TaskCheckInterval = 20 * time.Millisecond
	cfg.DelayedTaskCheckInterval = 100 * time.Millisecond
	cfg.ProgressInterval = 10 * time.Millisecond
	// An entry per token, however fast the fixture decodes: the streams' chunks are tokens.
	cfg.StreamInterval = 0
	cfg.RetryDelay = 100 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.WebhookSecret = webhookSecret
	cfg.WebhookAllow = testWebhookAllow(t)
	d, err := daemon.New(cfg, daemon.Options{Logger: testlog.New(t, slog.LevelInfo), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		d.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(d.Shutdown)
	b.daemon, b.dcfg = d, cfg
}

// startAPI starts an API server (again, after stopAPI) on b.cfg.
func (b *bundle) startAPI(t *testing.T) {
	t.Helper()
	cfg := b.cfg
	api, err := api.New(cfg, api.Options{Logger: testlog.New(t, slog.LevelDebug)})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Start(context.Background()); err != nil {
		api.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(api.Shutdown)
	b.api, b.base = api, "http://"+api.Addr()
	// A restarted API keeps its port, so that clients holding the URL find it again.
	b.cfg.Addr = api.Addr()
}

func (b *bundle) modelName() string {
	if b.daemon == nil {
		return ""
	}
	return b.daemon.ModelName()
}

// call sends a request with token (none when empty) and returns the status and body.
func (b *bundle) call(t *testing.T, token, method, path string, body any, hdr ...string) (int, []byte) {
	t.Helper()
	resp := b.send(t, token, method, path, body, hdr...)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

func (b *bundle) send(t *testing.T, token, method, path string, body any, hdr ...string) *http.Response {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(v)
	case string:
		rd = strings.NewReader(v)
	default:
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// submit posts a job and returns its view; it fails the test unless the status is want.
func (b *bundle) submit(t *testing.T, token string, body any, want int, hdr ...string) api.JobView {
	t.Helper()
	code, data := b.call(t, token, "POST", "/v1/jobs", body, hdr...)
	if code != want {
		t.Fatalf("POST /v1/jobs: status %d, want %d: %s", code, want, data)
	}
	var v api.JobView
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("POST /v1/jobs: %v: %s", err, data)
	}
	return v
}

type apiErr struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// wantError checks an OpenAI-shaped error: its status, code and a part of its message.
func wantError(t *testing.T, what string, code int, body []byte, wantCode int, errCode, msgPart string) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("%s: status %d, want %d: %s", what, code, wantCode, body)
	}
	var e apiErr
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("%s: not an OpenAI-shaped error (%v): %s", what, err, body)
	}
	if errCode != "" && (e.Error.Code == nil || *e.Error.Code != errCode) {
		t.Errorf("%s: code %v, want %q: %s", what, e.Error.Code, errCode, body)
	}
	if !strings.Contains(e.Error.Message, msgPart) {
		t.Errorf("%s: message %q does not contain %q", what, e.Error.Message, msgPart)
	}
}

// taskCount is the number of asynq tasks in Redis.
func (b *bundle) taskCount(t *testing.T) int {
	t.Helper()
	keys, err := b.rdb.Keys(context.Background(), "asynq:{*}:t:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

func generate(maxTokens int, extra ...any) map[string]any {
	m := map[string]any{"type": "generate", "version": 1, "temperature": 0, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": "Say hello."}}}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

type sseEvent struct {
	name string
	data string
	id   string
}

// readEvents reads Server-Sent Events until the stream ends.
func readEvents(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" || cur.data != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data += strings.TrimPrefix(line, "data: ")
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestNativeJobs(t *testing.T) {
	b := setup(t, setupOpts{})

	t.Run("SubmitWaitResult", func(t *testing.T) {
		v := b.submit(t, tokenA, generate(4, "metadata", map[string]string{"req": "r1"}), http.StatusCreated)
		// The fleet routes it to its model and capacity bucket: default@<model>@ctx<tokens>.
		if v.ID == "" || jobs.BaseQueue(v.Queue) != jobs.QueueDefault || v.Type != jobs.TypeGenerate {
			t.Fatalf("POST /v1/jobs: %+v", v)
		}
		code, data := b.call(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/result?wait=60s", nil)
		if code != http.StatusOK {
			t.Fatalf("result: status %d: %s", code, data)
		}
		var res jobs.Result
		if err := json.Unmarshal(data, &res); err != nil {
			t.Fatal(err)
		}
		if res.Usage.CompletionTokens < 1 || res.Usage.CompletionTokens > 4 || res.Worker != "test-worker" || string(res.Metadata) != `{"req":"r1"}` {
			t.Errorf("result: %s", data)
		}
		code, data = b.call(t, tokenA, "GET", "/v1/jobs/"+v.ID, nil)
		var st api.JobView
		if code != http.StatusOK || json.Unmarshal(data, &st) != nil || st.State != jobs.StateCompleted || st.Result == nil || st.CompletedAt == nil {
			t.Errorf("GET job: %d %s", code, data)
		}
	})

	t.Run("Summarize", func(t *testing.T) {
		v := b.submit(t, tokenA, map[string]any{"type": "summarize", "version": 1, "input": "The cat sat on the mat. It was warm.", "max_tokens": 3, "priority": "high"}, http.StatusCreated)
		if jobs.BaseQueue(v.Queue) != jobs.QueueCritical {
			t.Errorf("queue %q, want %q routed to a bucket of the worker", v.Queue, jobs.QueueCritical)
		}
		code, data := b.call(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/result?wait=60", nil)
		if code != http.StatusOK {
			t.Fatalf("result: status %d: %s", code, data)
		}
	})

	t.Run("Events", func(t *testing.T) {
		v := b.submit(t, tokenA, generate(200), http.StatusCreated)
		resp := b.send(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/events", nil)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		evs := readEvents(t, resp.Body)
		if len(evs) < 2 {
			t.Fatalf("events: %+v, want progress then result", evs)
		}
		// Progress events (without the text), delta events with the text, then the result;
		// the deltas put together are the result's text.
		var text strings.Builder
		deltas := 0
		for _, e := range evs[:len(evs)-1] {
			switch e.name {
			case "progress":
				var p jobs.Progress
				if json.Unmarshal([]byte(e.data), &p) != nil || p.Phase == "" || p.Text != "" || p.Reasoning != "" {
					t.Errorf("event %+v, want progress without text", e)
				}
			case "delta":
				var d struct {
					Text string `json:"text"`
					Gap  bool   `json:"gap"`
				}
				if json.Unmarshal([]byte(e.data), &d) != nil || d.Text == "" || d.Gap {
					t.Errorf("event %+v, want a delta with text", e)
				}
				text.WriteString(d.Text)
				deltas++
			default:
				t.Errorf("event %+v, want progress or delta", e)
			}
		}
		last := evs[len(evs)-1]
		var res jobs.Result
		if last.name != "result" || json.Unmarshal([]byte(last.data), &res) != nil || res.Usage.CompletionTokens < 1 {
			t.Fatalf("last event %+v, want the result", last)
		}
		// The daemon writes an entry per token (REDLITE_STREAM_INTERVAL=0): a delta each,
		// but for tokens whose text is held back (half a character, a possible stop string).
		if deltas < res.Usage.CompletionTokens/2 || text.String() != res.Text {
			t.Errorf("%d deltas make %q, the result's text is %q", deltas, text.String(), res.Text)
		}
		t.Logf("%d tokens in %d deltas", res.Usage.CompletionTokens, deltas)

		t.Run("LastEventID", func(t *testing.T) {
			// A reader that reconnects with the id of its 10th delta gets the text after it,
			// once, then the result.
			var ids []string
			var had strings.Builder
			for _, e := range evs {
				if e.name == "delta" && len(ids) < 10 {
					var d struct{ Text string }
					json.Unmarshal([]byte(e.data), &d)
					had.WriteString(d.Text)
					ids = append(ids, e.id)
				}
			}
			if len(ids) < 10 || ids[9] == "" {
				t.Fatalf("delta ids %q", ids)
			}
			resp := b.send(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/events", nil, "Last-Event-ID", ids[9])
			defer resp.Body.Close()
			rest := readEvents(t, resp.Body)
			for _, e := range rest[:len(rest)-1] {
				if e.name == "delta" {
					var d struct{ Text string }
					json.Unmarshal([]byte(e.data), &d)
					had.WriteString(d.Text)
				}
			}
			if got := had.String(); got != res.Text || rest[len(rest)-1].name != "result" {
				t.Errorf("resumed after %s: %q then %s, want the text %q", ids[9], got, rest[len(rest)-1].name, res.Text)
			}
			code, data := b.call(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/events", nil, "Last-Event-ID", "garbage")
			wantError(t, "bad Last-Event-ID", code, data, http.StatusBadRequest, "invalid_request", "Last-Event-ID")
		})

		t.Run("LastEventIDWhileRunning", func(t *testing.T) {
			// A reader drops the connection after 5 deltas of a 1,500-token job and comes back
			// with the last id while the job still runs: the text goes on from the stream.
			v := b.submit(t, tokenA, generate(1500, "messages", nil, "prompt", "Once upon a time"), http.StatusCreated)
			resp := b.send(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/events", nil)
			var had strings.Builder
			last, n := "", 0
			sc := bufio.NewScanner(resp.Body)
			for n < 5 && sc.Scan() {
				line := sc.Text()
				switch {
				case strings.HasPrefix(line, "id: "):
					last = strings.TrimPrefix(line, "id: ")
				case strings.HasPrefix(line, "data: ") && last != "":
					var d struct{ Text string }
					json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d)
					had.WriteString(d.Text)
					n++
				}
			}
			resp.Body.Close()
			if n < 5 {
				t.Fatalf("%d deltas before the stream ended", n)
			}
			again := b.send(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/events", nil, "Last-Event-ID", last)
			defer again.Body.Close()
			evs := readEvents(t, again.Body)
			progress := 0
			for _, e := range evs[:len(evs)-1] {
				switch e.name {
				case "delta":
					var d struct{ Text string }
					json.Unmarshal([]byte(e.data), &d)
					had.WriteString(d.Text)
				case "progress":
					progress++
				default:
					t.Errorf("event %+v", e)
				}
			}
			var res jobs.Result
			if end := evs[len(evs)-1]; end.name != "result" || json.Unmarshal([]byte(end.data), &res) != nil || had.String() != res.Text {
				t.Errorf("resumed at %s: %q, want the result's text %q", last, had.String(), res.Text)
			}
			t.Logf("resumed after 5 deltas: %d more events (%d progress) for %d tokens", len(evs)-1, progress, res.Usage.CompletionTokens)
		})
	})

	t.Run("Idempotency", func(t *testing.T) {
		v1 := b.submit(t, tokenA, generate(2), http.StatusCreated, "Idempotency-Key", "idem-1")
		v2 := b.submit(t, tokenA, generate(2), http.StatusOK, "Idempotency-Key", "idem-1")
		v3 := b.submit(t, tokenA, generate(2, "idempotency_key", "idem-1"), http.StatusOK)
		// The key is the id within the token's namespace: "<token digest>.<key>".
		if !strings.HasSuffix(v1.ID, ".idem-1") || v2.ID != v1.ID || v3.ID != v1.ID || !v2.Duplicate || v1.Duplicate {
			t.Errorf("ids %q %q %q, duplicate %v %v", v1.ID, v2.ID, v3.ID, v1.Duplicate, v2.Duplicate)
		}
		code, data := b.call(t, tokenA, "POST", "/v1/jobs", generate(2, "idempotency_key", "idem-2"), "Idempotency-Key", "idem-3")
		wantError(t, "header and field differ", code, data, http.StatusBadRequest, "invalid_request", "differ")
		// Another token's equal key is its own job.
		vb := b.submit(t, tokenB, generate(2), http.StatusCreated, "Idempotency-Key", "idem-1")
		if vb.ID == v1.ID || vb.Duplicate || !strings.HasSuffix(vb.ID, ".idem-1") {
			t.Errorf("token B's key idem-1: %+v, want a job of its own (A's is %s)", vb, v1.ID)
		}
		// The same key with another body is a conflict, not the first job.
		code, data = b.call(t, tokenA, "POST", "/v1/jobs", generate(3), "Idempotency-Key", "idem-1")
		wantError(t, "key reused with another body", code, data, http.StatusConflict, "idempotency_conflict", "another request body")
		// A body refused by the fleet leaves the key free for another.
		small := generate(2, "model", "no-such-model")
		code, data = b.call(t, tokenA, "POST", "/v1/jobs", small, "Idempotency-Key", "idem-4")
		wantError(t, "unknown model", code, data, http.StatusNotFound, "model_not_found", "no-such-model")
		b.submit(t, tokenA, generate(2), http.StatusCreated, "Idempotency-Key", "idem-4")
		// A key as long as a key may be still fits in a job id.
		long := strings.Repeat("k", jobs.MaxIdempotencyKeyLen)
		vl := b.submit(t, tokenA, generate(2), http.StatusCreated, "Idempotency-Key", long)
		if vl2 := b.submit(t, tokenA, generate(2), http.StatusOK, "Idempotency-Key", long); vl2.ID != vl.ID || len(vl.ID) > jobs.MaxIdempotencyKeyLen {
			t.Errorf("a 128-byte key: ids %q and %q", vl.ID, vl2.ID)
		}
	})

	t.Run("CancelRunning", func(t *testing.T) {
		body := generate(jobs.MaxMaxTokens)
		body["messages"] = nil
		delete(body, "messages")
		body["prompt"] = "Once upon a time"
		v := b.submit(t, tokenA, body, http.StatusCreated)
		resp := b.send(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/events", nil)
		defer resp.Body.Close()
		// Cancel once the worker is decoding, as the event stream says.
		rd := bufio.NewReader(resp.Body)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("events ended before decoding: %v", err)
			}
			if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"phase":"decode"`) {
				break
			}
		}
		code, data := b.call(t, tokenA, "DELETE", "/v1/jobs/"+v.ID, nil)
		var st api.JobView
		if code != http.StatusOK || json.Unmarshal(data, &st) != nil || st.State != jobs.StateArchived ||
			st.Result == nil || st.Result.FinishReason != jobs.FinishCancelled {
			t.Fatalf("DELETE: %d %s", code, data)
		}
		rest, _ := io.ReadAll(rd)
		evs := readEvents(t, bytes.NewReader(rest))
		if len(evs) == 0 || evs[len(evs)-1].name != "error" || !strings.Contains(evs[len(evs)-1].data, "job_cancelled") {
			t.Errorf("events after cancel: %+v, want an error job_cancelled", evs)
		}
		code, data = b.call(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/result", nil)
		wantError(t, "result of a cancelled job", code, data, http.StatusConflict, "job_cancelled", "cancelled")
		code, data = b.call(t, tokenA, "DELETE", "/v1/jobs/"+v.ID, nil)
		wantError(t, "cancel again", code, data, http.StatusConflict, "job_finished", "already finished")
	})

	t.Run("WorkersAndModels", func(t *testing.T) {
		code, data := b.call(t, tokenA, "GET", "/v1/workers", nil)
		var ws struct {
			Data []jobs.WorkerServer `json:"data"`
		}
		if code != http.StatusOK || json.Unmarshal(data, &ws) != nil || len(ws.Data) != 1 || ws.Data[0].Name != "test-worker" {
			t.Errorf("workers: %d %s", code, data)
		}
		code, data = b.call(t, tokenA, "GET", "/v1/models", nil)
		var ms struct {
			Object string      `json:"object"`
			Data   []api.Model `json:"data"`
		}
		if code != http.StatusOK || json.Unmarshal(data, &ms) != nil || ms.Object != "list" || len(ms.Data) != 1 || ms.Data[0].ID != b.modelName() {
			t.Errorf("models: %d %s (model %q)", code, data, b.modelName())
		}
	})

	t.Run("HealthAndMetrics", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/readyz"} {
			if code, data := b.call(t, "", "GET", p, nil); code != http.StatusOK {
				t.Errorf("%s: %d %s", p, code, data)
			}
		}
		code, data := b.call(t, "", "GET", "/metrics", nil)
		if code != http.StatusOK || !strings.Contains(string(data), `redlite_api_requests_total{code="201",route="POST /v1/jobs"}`) ||
			!strings.Contains(string(data), `redlite_api_request_duration_seconds_bucket{route="GET /v1/jobs/{id}/result"`) {
			t.Errorf("metrics: %d\n%s", code, data)
		}
	})
}

// TestBadRequests sends what a careless or hostile client would: each gets the right status
// and a message naming the problem, and nothing is enqueued.
func TestBadRequests(t *testing.T) {
	b := setup(t, setupOpts{noDaemon: true, config: func(c *api.Config) { c.MaxBodyBytes = 4096; c.MaxFileBytes = 2048 }})
	cases := []struct {
		name, token, method, path string
		body                      any
		hdr                       []string
		status                    int
		code, msg                 string
	}{
		{"NoToken", "", "POST", "/v1/jobs", generate(4), nil, 401, "missing_api_key", "Authorization: Bearer"},
		{"WrongToken", "nope", "POST", "/v1/jobs", generate(4), nil, 401, "invalid_api_key", "invalid bearer token"},
		{"NotBearer", "", "POST", "/v1/jobs", generate(4), []string{"Authorization", "Basic dTpw"}, 401, "missing_api_key", "Bearer"},
		{"BadJSON", tokenA, "POST", "/v1/jobs", `{"type": "generate", "version": 1,}`, nil, 400, "invalid_request", "byte offset 34"},
		{"Empty", tokenA, "POST", "/v1/jobs", ``, nil, 400, "invalid_request", "empty"},
		{"Array", tokenA, "POST", "/v1/jobs", `[1]`, nil, 400, "invalid_request", "JSON object"},
		{"Trailing", tokenA, "POST", "/v1/jobs", `{"type":"generate"} {}`, nil, 400, "invalid_request", "data follows"},
		{"NoType", tokenA, "POST", "/v1/jobs", `{"version": 1, "prompt": "x"}`, nil, 400, "invalid_request", "type is required"},
		{"BadType", tokenA, "POST", "/v1/jobs", `{"type": "translate", "version": 1}`, nil, 400, "invalid_payload", `got "translate"`},
		{"UnknownField", tokenA, "POST", "/v1/jobs", generate(4, "bogus", 1), nil, 400, "invalid_payload", "bogus: unknown field"},
		{"BadField", tokenA, "POST", "/v1/jobs", generate(0), nil, 400, "invalid_payload", "max_tokens: must be between 1"},
		{"BadIdemHeader", tokenA, "POST", "/v1/jobs", generate(4), []string{"Idempotency-Key", "a b"}, 400, "invalid_request", "Idempotency-Key header"},
		{"Oversize", tokenA, "POST", "/v1/jobs", generate(4, "prompt", strings.Repeat("x", 5000)), nil, 413, "request_too_large", "4096 bytes"},
		{"BadStrategy", tokenA, "POST", "/v1/jobs", `{"type": "summarize", "version": 1, "input": "x", "strategy": "fast"}`, nil, 400, "invalid_payload", "strategy: must be one of auto, single, hierarchical"},
		{"ClientPart", tokenA, "POST", "/v1/jobs", `{"type": "summarize", "version": 1, "input": "x", "part": {"parent": "p", "level": 0, "index": 0, "pieces": 1}}`, nil, 400, "invalid_request", "is set by workers on the child jobs"},
		{"BadWait", tokenA, "GET", "/v1/jobs/x/result?wait=soon", nil, nil, 400, "invalid_request", "wait must be a duration"},
		{"UnknownJob", tokenA, "GET", "/v1/jobs/nope", nil, nil, 404, "not_found", "nope"},
		{"CancelUnknown", tokenA, "DELETE", "/v1/jobs/nope", nil, nil, 404, "not_found", "nope"},
		{"UnknownRoute", tokenA, "GET", "/v2/things", nil, nil, 404, "unknown_route", "/v2/things"},
		{"TimeoutZero", tokenA, "POST", "/v1/jobs", generate(4, "timeout", 0), nil, 400, "invalid_payload", "timeout: must be between 1 and 604800"},
		{"MetadataDeep", tokenA, "POST", "/v1/jobs", `{"type":"generate","version":1,"prompt":"x","metadata":{"a":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}}`,
			nil, 400, "invalid_payload", "metadata: must nest at most 32 levels"},
		{"StreamOptionsAlone", tokenA, "POST", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}},
			"stream_options": map[string]any{"include_usage": true}}, nil, 400, "invalid_request", "stream_options is only allowed when stream is true"},
		{"StreamOptionsStreamFalse", tokenA, "POST", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}},
			"stream": false, "stream_options": map[string]any{"include_usage": true}}, nil, 400, "invalid_request", "stream_options"},
		{"MethodNotAllowed", tokenA, "PUT", "/v1/jobs/x", nil, nil, 405, "method_not_allowed", "allowed: GET, DELETE"},
		{"MethodNotAllowedNoToken", "", "PATCH", "/v1/files", nil, nil, 405, "method_not_allowed", "allowed: GET, POST"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, data := b.call(t, c.token, c.method, c.path, c.body, c.hdr...)
			wantError(t, c.name, code, data, c.status, c.code, c.msg)
		})
	}
	t.Run("AllowHeader", func(t *testing.T) {
		for path, want := range map[string]string{"/v1/jobs": "POST", "/v1/jobs/x": "GET, DELETE", "/v1/batches/x/cancel": "POST", "/healthz": "GET"} {
			resp := b.send(t, tokenA, "PUT", path, nil)
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != want {
				t.Errorf("PUT %s: %d, Allow %q; want 405 and Allow %q", path, resp.StatusCode, resp.Header.Get("Allow"), want)
			}
		}
	})
	t.Run("OversizeFile", func(t *testing.T) {
		var form bytes.Buffer
		mw := multipart.NewWriter(&form)
		mw.WriteField("purpose", "batch")
		fw, _ := mw.CreateFormFile("file", "in.jsonl")
		fw.Write(bytes.Repeat([]byte("x"), 3000))
		mw.Close()
		code, data := b.call(t, tokenA, "POST", "/v1/files", form.Bytes(), "Content-Type", mw.FormDataContentType())
		wantError(t, "oversize file", code, data, http.StatusRequestEntityTooLarge, "request_too_large", "2048 bytes")
		code, data = b.call(t, tokenA, "POST", "/v1/files", `{"purpose":"batch"}`, "Content-Type", "application/json")
		wantError(t, "not multipart", code, data, http.StatusBadRequest, "invalid_request", "multipart/form-data")
	})
	if n := b.taskCount(t); n != 0 {
		t.Errorf("%d tasks in Redis after bad requests, want 0", n)
	}

	t.Run("OwnerOnly", func(t *testing.T) {
		v := b.submit(t, tokenA, generate(2), http.StatusCreated)
		code, data := b.call(t, tokenB, "GET", "/v1/jobs/"+v.ID, nil)
		wantError(t, "another token's job", code, data, http.StatusNotFound, "not_found", v.ID)
		code, data = b.call(t, tokenB, "DELETE", "/v1/jobs/"+v.ID, nil)
		wantError(t, "cancel another token's job", code, data, http.StatusNotFound, "not_found", v.ID)
		code, data = b.call(t, tokenA, "DELETE", "/v1/jobs/"+v.ID, nil)
		if code != http.StatusOK {
			t.Errorf("cancel own pending job: %d %s", code, data)
		}
	})

	t.Run("NotDoneYet", func(t *testing.T) {
		v := b.submit(t, tokenA, generate(2), http.StatusCreated)
		code, data := b.call(t, tokenA, "GET", "/v1/jobs/"+v.ID+"/result?wait=10ms", nil)
		var st api.JobView
		if code != http.StatusAccepted || json.Unmarshal(data, &st) != nil || st.State != jobs.StatePending || st.Progress == nil || st.Progress.Phase != jobs.PhaseQueued {
			t.Errorf("result of a pending job: %d %s", code, data)
		}
	})
}

func TestLimits(t *testing.T) {
	b := setup(t, setupOpts{noDaemon: true, config: func(c *api.Config) { c.MaxQueuedJobs = 2; c.RateLimit = 5 }})

	t.Run("QueuedJobs", func(t *testing.T) {
		b.submit(t, tokenA, generate(2), http.StatusCreated)
		b.submit(t, tokenA, generate(2), http.StatusCreated)
		before := b.taskCount(t)
		code, data := b.call(t, tokenA, "POST", "/v1/jobs", generate(2))
		wantError(t, "third job", code, data, http.StatusTooManyRequests, "too_many_queued_jobs", "REDLITE_API_MAX_QUEUED_JOBS")
		if n := b.taskCount(t); n != before {
			t.Errorf("%d tasks after a refused job, want %d", n, before)
		}
		// Another token has its own count.
		b.submit(t, tokenB, generate(2), http.StatusCreated)
	})

	t.Run("Rate", func(t *testing.T) {
		// 12 requests within at most two one-second windows: at most 10 pass.
		var limited int
		for range 12 {
			code, data := b.call(t, tokenB, "GET", "/v1/models", nil)
			if code == http.StatusTooManyRequests {
				wantError(t, "rate", code, data, http.StatusTooManyRequests, "rate_limit_exceeded", "REDLITE_API_RATE_LIMIT")
				limited++
			}
		}
		if limited == 0 {
			t.Error("12 requests at a limit of 5/s: none refused")
		}
	})
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, "no tokens"},
		{[]string{"REDLITE_API_TOKENS=a", "REDLITE_API_ADDR=nope"}, "REDLITE_API_ADDR"},
		{[]string{"REDLITE_API_TOKENS=a", "REDLITE_API_RATE_LIMIT=-1"}, "REDLITE_API_RATE_LIMIT"},
		{[]string{"REDLITE_API_TOKENS=a", "REDLITE_API_MAX_WAIT=soon"}, "REDLITE_API_MAX_WAIT"},
		{[]string{"REDLITE_API_TOKENS=a", "REDLITE_API_TOKENS_FILE=/nonexistent"}, "REDLITE_API_TOKENS_FILE"},
		{[]string{"REDLITE_API_TOKENS=a", "REDLITE_REDIS_URL=http://x"}, "REDLITE_REDIS_URL"},
		{[]string{"REDLITE_API_TOKENS=a", "REDLITE_API_CORS_ORIGINS=example.com"}, "REDLITE_API_CORS_ORIGINS"},
	} {
		_, err := api.ConfigFromEnv(c.env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ConfigFromEnv(%q): %v, want an error naming %s", c.env, err, c.want)
		}
	}
}

// TestTokensFileAndCORS: a token known only by its SHA-256 in REDLITE_API_TOKENS_FILE is
// accepted; browsers get CORS headers only for configured origins.
func TestTokensFileAndCORS(t *testing.T) {
	const secret = "file-token-0123456789"
	file := filepath.Join(t.TempDir(), "tokens")
	content := "# API tokens\n" + api.HashToken(secret) + " team-a\n\n"
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setup(t, setupOpts{noDaemon: true, config: func(c *api.Config) {
		c.TokensFile = file
		c.CORSOrigins = []string{"https://app.example.com"}
	}})
	if code, data := b.call(t, secret, "GET", "/v1/models", nil); code != http.StatusOK {
		t.Errorf("a token from the file: %d %s", code, data)
	}
	if code, _ := b.call(t, api.HashToken(secret), "GET", "/v1/models", nil); code != http.StatusUnauthorized {
		t.Errorf("the digest itself as a token: %d, want 401", code)
	}
	resp := b.send(t, "", "OPTIONS", "/v1/jobs", nil, "Origin", "https://app.example.com", "Access-Control-Request-Method", "POST")
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Errorf("preflight from an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	resp = b.send(t, tokenA, "GET", "/v1/models", nil, "Origin", "https://evil.example.com")
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("another origin got CORS headers: %v", resp.Header)
	}

	// Off by default.
	d := setup(t, setupOpts{noDaemon: true})
	resp = d.send(t, tokenA, "GET", "/v1/models", nil, "Origin", "https://app.example.com")
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS headers without REDLITE_API_CORS_ORIGINS: %v", resp.Header)
	}
}

// TestWebhookPerToken: a job submitted through the API has its webhook signed with its
// token's secret (GET /v1/webhook_secret), which verifies it; the workers' own secret and
// another token's do not.
func TestWebhookPerToken(t *testing.T) {
	const master = "master-secret"
	b := setup(t, setupOpts{webhookSecret: master})
	type delivery struct {
		ts, sig string
		body    []byte
	}
	got := make(chan delivery, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Get(jobs.WebhookHeaderTimestamp), r.Header.Get(jobs.WebhookHeaderSignature), body}
	}))
	defer srv.Close()
	secretOf := func(token string) []byte {
		code, data := b.call(t, token, "GET", "/v1/webhook_secret", nil)
		var s api.WebhookSecret
		if code != http.StatusOK || json.Unmarshal(data, &s) != nil || len(s.Secret) != 64 {
			t.Fatalf("webhook secret: %d %s", code, data)
		}
		return []byte(s.Secret)
	}
	a, other := secretOf(tokenA), secretOf(tokenB)
	b.submit(t, tokenA, generate(2, "webhook_url", srv.URL), http.StatusCreated)
	var d delivery
	select {
	case d = <-got:
	case <-time.After(waitLimit):
		t.Fatal("no webhook")
	}
	if err := jobs.VerifyWebhook(a, d.ts, d.sig, d.body, time.Now(), 0); err != nil {
		t.Errorf("with the token's secret: %v", err)
	}
	for name, s := range map[string][]byte{"the workers' secret": []byte(master), "another token's secret": other} {
		if err := jobs.VerifyWebhook(s, d.ts, d.sig, d.body, time.Now(), 0); err == nil {
			t.Errorf("verified with %s", name)
		}
	}

	// Without a secret there is none to tell.
	u := setup(t, setupOpts{noDaemon: true})
	code, data := u.call(t, tokenA, "GET", "/v1/webhook_secret", nil)
	wantError(t, "unsigned", code, data, http.StatusNotFound, "webhooks_unsigned", "REDLITE_WEBHOOK_SECRET")
}
