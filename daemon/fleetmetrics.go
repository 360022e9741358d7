package daemon

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/jobs"
)

// refusedCollector exports the fleet-wide count of jobs clients refused at submit
// (jobs.RefusedKey), read from Redis at each scrape as asynq's queue metrics are. Every
// worker exports the same count: dashboards take the max over instances.
type refusedCollector struct {
	rdb  redis.UniversalClient
	desc *prometheus.Desc
}

func newRefusedCollector(rdb redis.UniversalClient) *refusedCollector {
	return &refusedCollector{rdb: rdb, desc: prometheus.NewDesc("redlite_jobs_refused_total",
		"Jobs refused at submit by any client of the fleet (read from Redis; the same on every worker), by reason (unknown_model, no_capacity).",
		[]string{"reason"}, nil)}
}

func (c *refusedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *refusedCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.rdb.HGetAll(ctx, jobs.RefusedKey).Result()
	if err != nil {
		return // no value rather than a wrong one
	}
	for _, reason := range []string{"unknown_model", "no_capacity"} {
		n, _ := strconv.ParseFloat(counts[reason], 64)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, n, reason)
	}
}
