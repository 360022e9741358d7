package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/redlite/batch/jobs"
)

func init() {
	register(command{name: "status", summary: "show a job's state, progress and last error", run: runStatus})
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stderr)
	jf := addJobsFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	id, err := parseWithID(fs, args)
	if err != nil {
		return err
	}
	c, err := jf.open(0)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := c.Status(ctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, statusJSON(st))
	}
	fmt.Fprintf(stdout, "job:       %s (%s, queue %s)\nstate:     %s\n", st.ID, st.Type, st.Queue, st.State)
	if p := st.Progress; p != nil && (p.Phase == jobs.PhaseMap || p.Phase == jobs.PhaseReduce) {
		// A hierarchical summary's parent, between two checks of its child jobs.
		fmt.Fprintf(stdout, "progress:  %s (level %d), %d/%d pieces done (at %s)\n", p.Phase, p.Level, p.PiecesDone, p.PiecesTotal,
			p.UpdatedAt.Local().Format(time.TimeOnly))
	} else if p != nil && st.State == jobs.StateActive {
		fmt.Fprintf(stdout, "progress:  %s, prefilled %d/%d, generated %d/%d (at %s)\n", p.Phase, p.Prefilled, p.PromptTokens,
			p.Generated, p.MaxTokens, p.UpdatedAt.Local().Format(time.TimeOnly))
	}
	if r := st.Result; r != nil {
		fmt.Fprintf(stdout, "result:    %s, %d prompt + %d generated tokens (redlite result %s)\n", r.FinishReason,
			r.Usage.PromptTokens, r.Usage.CompletionTokens, st.ID)
	}
	fmt.Fprintf(stdout, "retries:   %d of %d\n", st.Retried, st.MaxRetry)
	if st.LastError != "" {
		fmt.Fprintf(stdout, "error:     %s\n", st.LastError)
	}
	if !st.CompletedAt.IsZero() {
		fmt.Fprintf(stdout, "completed: %s (kept %s)\n", st.CompletedAt.Local().Format(time.RFC3339), st.Retention)
	} else if !st.NextProcessAt.IsZero() && (st.State == jobs.StateRetry || st.State == jobs.StateScheduled) {
		fmt.Fprintf(stdout, "next run:  %s\n", st.NextProcessAt.Local().Format(time.RFC3339))
	}
	return nil
}

// statusJSON is the --json form of a status, with lower-case names as in the job schemas.
func statusJSON(st jobs.Status) any {
	type out struct {
		ID            string         `json:"id"`
		Type          string         `json:"type"`
		Queue         string         `json:"queue"`
		State         jobs.State     `json:"state"`
		Progress      *jobs.Progress `json:"progress,omitempty"`
		Result        *jobs.Result   `json:"result,omitempty"`
		LastError     string         `json:"last_error,omitempty"`
		Retried       int            `json:"retried"`
		MaxRetry      int            `json:"max_retry"`
		NextProcessAt *time.Time     `json:"next_process_at,omitempty"`
		CompletedAt   *time.Time     `json:"completed_at,omitempty"`
	}
	o := out{ID: st.ID, Type: st.Type, Queue: st.Queue, State: st.State, Progress: st.Progress, Result: st.Result,
		LastError: st.LastError, Retried: st.Retried, MaxRetry: st.MaxRetry}
	if !st.NextProcessAt.IsZero() {
		o.NextProcessAt = &st.NextProcessAt
	}
	if !st.CompletedAt.IsZero() {
		o.CompletedAt = &st.CompletedAt
	}
	return o
}

// parseWithID parses flags around exactly one job id argument.
func parseWithID(fs *flag.FlagSet, args []string) (string, error) {
	// The id may come before or after the flags.
	var id string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		id, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return "", flagErr(err)
	}
	if id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
		if fs.NArg() > 1 {
			return "", usageErr("unexpected argument %q", fs.Arg(1))
		}
	} else if fs.NArg() > 0 {
		return "", usageErr("unexpected argument %q", fs.Arg(0))
	}
	if id == "" {
		return "", usageErr("a job id is required")
	}
	return id, nil
}

// flagErr turns a flag parse error into a usage error, as parseFlags does.
func flagErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageErr("%v", err)
}
