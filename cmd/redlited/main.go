// Command redlited is the Red Lite Batch worker daemon: it reads its configuration from
// REDLITE_* environment variables (the README lists them), pulls summarize and generate
// jobs from Redis, runs them on the engine and writes the results back. SIGTERM or SIGINT
// stop it gracefully: no new jobs, running ones get REDLITE_SHUTDOWN_TIMEOUT to finish and
// are otherwise handed back to their queue.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/redlite/batch/daemon"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: redlited (configured by REDLITE_* environment variables; see the README)")
		os.Exit(2)
	}
	cfg, err := daemon.ConfigFromEnv(os.Environ())
	if err != nil {
		fmt.Fprintf(os.Stderr, "redlited: invalid configuration: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg, daemon.Options{}); err != nil {
		fmt.Fprintf(os.Stderr, "redlited: %v\n", err)
		os.Exit(1)
	}
}
