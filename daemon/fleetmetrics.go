package daemon

import (
	"context"
	"errors"
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

// affinityCollector exports the fleet-wide count of jobs clients routed by prefix affinity
// (jobs.AffinityKey), as refusedCollector does its count.
type affinityCollector struct {
	rdb  redis.UniversalClient
	desc *prometheus.Desc
}

func newAffinityCollector(rdb redis.UniversalClient) *affinityCollector {
	return &affinityCollector{rdb: rdb, desc: prometheus.NewDesc("redlite_jobs_routed_by_affinity_total",
		"Jobs any client of the fleet sent to the own queue of a worker that ran a prompt they start with (read from Redis; the same on every worker).", nil, nil)}
}

func (c *affinityCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *affinityCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.rdb.HGet(ctx, jobs.AffinityKey, "routed").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return // no value rather than a wrong one
	}
	n, _ := strconv.ParseFloat(s, 64)
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, n)
}
