package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

func init() {
	register(command{name: "cancel", summary: "cancel a job: archive it if it waits, stop it if it runs", run: runCancel})
}

func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cancel", stderr)
	jf := addJobsFlags(fs)
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for a running job's worker to stop it")
	id, err := parseWithID(fs, args)
	if err != nil {
		return err
	}
	c, err := jf.open(0)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := c.Cancel(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "job %s cancelled\n", id)
	return nil
}
