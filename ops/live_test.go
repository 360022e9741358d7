package ops

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	asynqdash "github.com/redlite/batch/internal/dashboard"
	"github.com/redlite/batch/internal/testlog"

	"github.com/redlite/batch/daemon"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/jobs"
)

// liveWait bounds every wait on the daemon; nothing here sleeps.
const liveWait = 60 * time.Second

// scrapedMetrics returns the metric names a /metrics answer exports. Histograms and
// summaries also export their _bucket, _sum and _count series, which count as exported.
func scrapedMetrics(r io.Reader) (map[string]bool, error) {
	names := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) != 2 {
				continue
			}
			names[f[0]] = true
			switch f[1] {
			case "histogram":
				names[f[0]+"_bucket"], names[f[0]+"_sum"], names[f[0]+"_count"] = true, true, true
			case "summary":
				names[f[0]+"_sum"], names[f[0]+"_count"] = true, true
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names, sc.Err()
}

func TestScrapedMetrics(t *testing.T) {
	got, err := scrapedMetrics(strings.NewReader(`# HELP a_seconds x
# TYPE a_seconds histogram
a_seconds_bucket{le="1"} 0
a_seconds_sum 0
a_seconds_count 0
# TYPE b_total counter
b_total{x="y"} 3
c 1
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a_seconds", "a_seconds_bucket", "a_seconds_sum", "a_seconds_count", "b_total", "c"} {
		if !got[n] {
			t.Errorf("%s not found", n)
		}
	}
	if got["b_total_bucket"] || got["x"] {
		t.Errorf("found names that are not there: %v", got)
	}
}

// scrapeGenerated are the series Prometheus itself adds to every scrape.
var scrapeGenerated = map[string]bool{"up": true, "scrape_duration_seconds": true, "scrape_samples_scraped": true}

// TestAgainstLiveDaemon runs the real daemon on the fixture model against a real Redis,
// processes a job so that every per-job series exists, scrapes /metrics, and checks the
// dashboard and the alert rules against what it exports, and the compose health checks
// against the real handlers.
func TestAgainstLiveDaemon(t *testing.T) {
	model := fixtures.Path(t, "models", "tiny-qwen3-Q8_0.gguf")
	r := redistest.Start(t)

	cfg := daemon.DefaultConfig()
	cfg.RedisURL = r.URL(0)
	cfg.Model = model
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.WorkerName = "ops-test"
	cfg.GPULimitMiB = 4096
	cfg.MaxChunk = 512
	cfg.TaskCheckInterval = 20 * time.Millisecond
	cfg.DelayedTaskCheckInterval = 100 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	// Registry nil: the daemon's own registry, with the Go and process collectors, exactly
	// as redlited serves it.
	d, err := daemon.New(cfg, daemon.Options{Logger: testlog.New(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveWait)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		d.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(d.Shutdown)

	client, err := jobs.NewClient(cfg.RedisURL, jobs.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	maxTokens, temp := 4, 0.0
	job, err := client.Enqueue(ctx, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: &maxTokens, Temperature: &temp})
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Wait(ctx, job.ID, nil)
	if err != nil {
		t.Fatalf("job %s: %v", job.ID, err)
	}
	if res.FinishReason == "" {
		t.Fatalf("job %s finished without a finish_reason: %+v", job.ID, res)
	}

	base := "http://" + d.HTTPAddr()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	exported, err := scrapedMetrics(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || len(exported) == 0 {
		t.Fatalf("/metrics: status %d, %d metrics", resp.StatusCode, len(exported))
	}

	// The Redis metrics the rules and the dashboard read come from the redis-exporter
	// service of docker-compose.yml: run the same exporter (Debian's build of
	// oliver006/redis_exporter) against this Redis and add what it exports.
	for n := range redisExporterMetrics(t, r) {
		exported[n] = true
	}

	check := func(t *testing.T, uses map[string][]string) {
		var names []string
		for n := range uses {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			if exported[n] || scrapeGenerated[n] {
				continue
			}
			t.Errorf("%s reads %s, which neither the daemon nor the Redis exporter exports", strings.Join(uses[n], ", "), n)
		}
	}

	t.Run("DashboardQueriesReadExportedMetrics", func(t *testing.T) {
		uses := dashboardMetrics(t, loadDashboard(t))
		recorded := recordedNames(loadRules(t))
		for n := range uses {
			if recorded[n] {
				delete(uses, n) // checked against the rules in TestDashboard
			}
		}
		check(t, uses)
	})

	t.Run("AlertRulesReadExportedMetrics", func(t *testing.T) {
		check(t, rulesMetricNames(t))
	})

	t.Run("ComposeWorkerHealthcheck", func(t *testing.T) {
		u := healthURL(t, "worker", loadCompose(t).service(t, "worker").Healthcheck)
		resp, err := http.Get(base + u.Path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the worker health check's %s answers %s", u.Path, resp.Status)
		}
		// And the Dockerfile's, which names the same path.
		if !strings.Contains(string(readFile(t, "Dockerfile")), u.Path) {
			t.Errorf("the Dockerfile's HEALTHCHECK does not ask %s", u.Path)
		}
	})

	t.Run("ComposeDashboardHealthcheck", func(t *testing.T) {
		u := healthURL(t, "dashboard", loadCompose(t).service(t, "dashboard").Healthcheck)
		dash, err := asynqdash.New(cfg.RedisURL, jobs.TLSFiles{}, "", true)
		if err != nil {
			t.Fatal(err)
		}
		defer dash.Close()
		srv := httptest.NewServer(dash)
		defer srv.Close()
		resp, err := http.Get(srv.URL + u.Path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), jobs.QueueDefault) {
			t.Errorf("asynqmon's %s answers %s %.200q; want 200 listing queue %s", u.Path, resp.Status, body, jobs.QueueDefault)
		}
	})
}

// redisExporterMetrics runs prometheus-redis-exporter (apt-get install
// prometheus-redis-exporter) against r and returns the metric names it exports.
func redisExporterMetrics(t *testing.T, r *redistest.Server) map[string]bool {
	t.Helper()
	bin := needTool(t, "prometheus-redis-exporter", "apt-get install prometheus-redis-exporter")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out testlog.Buffer
	cmd := exec.Command(bin, "-redis.addr", "redis://"+r.Addr(), "-web.listen-address", addr)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(liveWait)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			names, perr := scrapedMetrics(resp.Body)
			resp.Body.Close()
			if perr != nil {
				t.Fatal(perr)
			}
			if names["redis_up"] {
				return names
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Redis exporter did not serve metrics within %v (last error %v):\n%s", liveWait, err, out.String())
		}
		time.Sleep(delay) // the exporter announces nothing: polling its port is the only way to know
	}
}
