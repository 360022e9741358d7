package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/redlite/batch/jobs"
)

func init() {
	register(command{name: "result", summary: "print a finished job's result (--wait for one still running)", run: runResult})
}

func runResult(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("result", stderr)
	jf := addJobsFlags(fs)
	text := fs.Bool("text", false, "print only the generated text")
	wait := fs.Bool("wait", false, "wait for the job to finish, showing progress")
	waitFor := fs.Duration("wait-timeout", 0, "give up waiting after this long (0: no limit)")
	id, err := parseWithID(fs, args)
	if err != nil {
		return err
	}
	c, err := jf.open(0)
	if err != nil {
		return err
	}
	defer c.Close()
	if *wait {
		return waitAndPrint(ctx, c, id, *waitFor, !*text, stdout, stderr)
	}
	res, err := c.Result(ctx, id)
	var je *jobs.JobError
	switch {
	case errors.As(err, &je) && res.FinishReason != "":
		// An archived job may still have a (cancelled) result: print it, and fail.
		printResult(stdout, res, *text)
		return err
	case err != nil:
		return err
	}
	if !*text {
		// The JSON holds the tree too; stderr shows its shape at a glance and leaves stdout
		// one JSON document.
		defer printTree(stderr, res)
	}
	return printResult(stdout, res, *text)
}

func printResult(w io.Writer, res jobs.Result, text bool) error {
	if text {
		_, err := fmt.Fprintln(w, res.Text)
		return err
	}
	return writeJSON(w, res)
}

// printTree draws a hierarchical summary's tree as text (nothing for a single pass).
func printTree(w io.Writer, res jobs.Result) {
	if res.Tree == nil {
		return
	}
	fmt.Fprintf(w, "hierarchical summary of %d pieces on %s:\n%s", len(res.Pieces), strings.Join(res.Workers, ", "), res.Tree)
}
