package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/planner"
)

func init() {
	register(command{name: "workers", summary: "the fleet's workers: model, backend, limit, longest job, slots, running jobs with their progress", run: runWorkers})
}

func runWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ws, done, err := readFleet("workers", args, stdout, stderr, jobs.Workers)
	if err != nil || done {
		return err
	}
	if len(ws) == 0 {
		fmt.Fprintln(stdout, "no workers (a worker's heartbeat expires 30 s after it stops)")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOST\tMODEL\tBACKEND\tLIMIT\tLARGEST JOB\tSLOTS\tEXPERTS\tSTATUS\tHEARTBEAT\tJOBS")
	now := time.Now()
	for _, w := range ws {
		var jobs []string
		for _, a := range w.Active {
			jobs = append(jobs, fmt.Sprintf("%s %s %s (%s)", a.Type, a.ID, progressText(a), now.Sub(a.Started).Round(time.Second)))
		}
		status := w.Status
		if w.Draining {
			status = "draining"
		}
		limit, largest, beat := "-", "-", "-"
		if w.GPULimitMiB > 0 {
			limit = fmt.Sprintf("%d MiB", w.GPULimitMiB)
		}
		if w.MaxContext > 0 {
			largest = fmt.Sprintf("%d tokens", w.MaxContext)
		}
		if !w.LastHeartbeat.IsZero() {
			beat = now.Sub(w.LastHeartbeat).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", orDash(w.Name), w.Host, orDash(w.Model), orDash(w.Backend), limit, largest,
			len(w.Active), w.Concurrency, expertsText(w), status, beat, orDash(strings.Join(jobs, ", ")))
	}
	return tw.Flush()
}

// progressText is a running job's phase and progress: "prefill 512/2048" or "decode 17/64".
func progressText(a jobs.ActiveJob) string {
	p := a.Progress
	switch {
	case p == nil:
		return "starting"
	case p.Phase == "prefill":
		return fmt.Sprintf("prefill %d/%d", p.Prefilled, p.PromptTokens)
	case p.Phase == "decode":
		return fmt.Sprintf("decode %d/%d", p.Generated, p.MaxTokens)
	}
	return string(p.Phase)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// expertsText is how a batching worker holds the routed experts: "full", "cache 8,659 MiB",
// or "-" for a worker that plans it per job.
func expertsText(w jobs.WorkerServer) string {
	if w.ExpertResidency == "cache" {
		return fmt.Sprintf("cache %s MiB", planner.Commas(w.ExpertCacheMiB))
	}
	return orDash(w.ExpertResidency)
}
