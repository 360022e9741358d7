package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlite/batch/api"
)

// TestLoad submits 1,000 jobs over loopback HTTP from 32 concurrent clients and reports
// requests per second and latency percentiles; it asserts only that every submission
// succeeded and that exactly 1,000 jobs are queued. Reproduce the numbers with
// go test ./api -run TestLoad -v.
func TestLoad(t *testing.T) {
	const total, clients = 1000, 32
	b := setup(t, setupOpts{noDaemon: true, config: func(c *api.Config) { c.MaxQueuedJobs = 0; c.RateLimit = 0 }})
	body, _ := json.Marshal(generate(4))
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var next atomic.Int64
	lat := make([]time.Duration, total)
	var failures atomic.Int64
	var firstErr sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				req, _ := http.NewRequest("POST", b.base+"/v1/jobs", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+tokenA)
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err == nil {
					data, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						err = &statusErr{resp.StatusCode, string(data)}
					}
				}
				lat[i] = time.Since(t0)
				if err != nil {
					failures.Add(1)
					firstErr.Do(func() { t.Errorf("submission %d: %v", i, err) })
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d submissions failed", n, total)
	}
	if n := b.taskCount(t); n != total {
		t.Errorf("%d jobs in Redis, want %d", n, total)
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[int(p*float64(total-1))] }
	t.Logf("%d submissions, %d clients: %.0f requests/s; latency p50 %v, p90 %v, p99 %v, max %v",
		total, clients, float64(total)/elapsed.Seconds(), pct(.5), pct(.9), pct(.99), lat[total-1])
}

type statusErr struct {
	code int
	body string
}

func (e *statusErr) Error() string { return http.StatusText(e.code) + ": " + e.body }
