package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redlite/batch/daemon"
)

func init() {
	register(command{name: "workers", summary: "list the workers asynq knows, with their queues and running jobs", run: runWorkers})
}

func runWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("workers", stderr)
	jf := addJobsFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if jf.envErr != nil {
		return fmt.Errorf("environment: %w", jf.envErr)
	}
	ws, err := daemon.Workers(jf.redisURL(), jf.tlsFiles())
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, ws)
	}
	if len(ws) == 0 {
		fmt.Fprintln(stdout, "no workers (a worker's heartbeat expires 30 s after it stops)")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOST\tPID\tVERSION\tSTATUS\tUP\tQUEUES\tBUSY\tJOBS")
	now := time.Now()
	for _, w := range ws {
		var jobs []string
		for _, a := range w.Active {
			jobs = append(jobs, fmt.Sprintf("%s %s (%s)", a.Type, a.ID, now.Sub(a.Started).Round(time.Second)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", orDash(w.Name), w.Host, w.PID, orDash(w.Version), w.Status, now.Sub(w.Started).Round(time.Second),
			queueList(w.Queues), len(w.Active), w.Concurrency, strings.Join(jobs, ", "))
	}
	return tw.Flush()
}

// queueList writes queues as name=weight, heaviest first.
func queueList(q map[string]int) string {
	names := make([]string, 0, len(q))
	for n := range q {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if q[names[i]] != q[names[j]] {
			return q[names[i]] > q[names[j]]
		}
		return names[i] < names[j]
	})
	for i, n := range names {
		names[i] = fmt.Sprintf("%s=%d", n, q[n])
	}
	return strings.Join(names, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
