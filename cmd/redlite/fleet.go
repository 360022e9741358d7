package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/redlite/batch/jobs"
)

func init() {
	register(command{name: "fleet", summary: "the fleet per model and capacity bucket: the longest job each holds, the workers serving it, queue depths", run: runFleet})
}

// readFleet runs the part the fleet commands share: their flags, the read from Redis with
// load, and --json. It returns done when it printed the JSON.
func readFleet[T any](name string, args []string, stdout, stderr io.Writer, load func(string, jobs.TLSFiles) (T, error)) (v T, done bool, err error) {
	fs := newFlags(name, stderr)
	jf := addJobsFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return v, false, err
	}
	if err := jf.envError(); err != nil {
		return v, false, err
	}
	if v, err = load(jf.redisURL(), jf.tlsFiles()); err != nil || !*asJSON {
		return v, false, err
	}
	return v, true, writeJSON(stdout, v)
}

func runFleet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, done, err := readFleet("fleet", args, stdout, stderr, jobs.FleetView)
	if err != nil || done {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tBUCKET\tJOBS UP TO\tWORKERS\tPENDING\tACTIVE\tRETRY\tARCHIVED")
	for _, c := range f.Buckets {
		var d jobs.QueueDepth
		for _, q := range c.Queues {
			d.Pending, d.Active, d.Retry, d.Archived = d.Pending+q.Pending, d.Active+q.Active, d.Retry+q.Retry, d.Archived+q.Archived
		}
		model := c.Model
		if model == "" {
			model = c.ModelKey
		}
		workers := strings.Join(c.Workers, ",")
		if len(c.Workers) == 0 {
			workers = "(none live)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d tokens\t%s\t%d\t%d\t%d\t%d\n", model, c.Bucket, c.MaxContext, workers, d.Pending, d.Active, d.Retry, d.Archived)
	}
	for _, q := range f.Other {
		fmt.Fprintf(tw, "(queue %s)\t-\t-\t-\t%d\t%d\t%d\t%d\n", q.Queue, q.Pending, q.Active, q.Retry, q.Archived)
	}
	return tw.Flush()
}
