// Command redlited is the Red Lite Batch worker daemon: it reads its configuration from
// REDLITE_* environment variables (docs/configuration.md lists them), pulls summarize and generate
// jobs from Redis, runs them on the engine and writes the results back. SIGTERM or SIGINT
// stop it gracefully: no new jobs, running ones get REDLITE_SHUTDOWN_TIMEOUT to finish and
// are otherwise handed back to their queue.
//
// Exit status: 0 after a graceful stop, 2 for invalid configuration (a bad REDLITE_* value,
// a model file that cannot be loaded), 1 for other errors.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redlite/batch/daemon"
	"github.com/redlite/batch/internal/buildinfo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

func run(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, buildinfo.Get().Line("redlited"))
		return 0
	}
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: redlited [--version] (configured by REDLITE_* environment variables; see docs/configuration.md)")
		return 2
	}
	cfg, err := daemon.ConfigFromEnv(environ)
	if err != nil {
		fmt.Fprintf(stderr, "redlited: invalid configuration: %v\n", err)
		return 2
	}
	log, err := daemon.NewLogger(cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "redlited: invalid configuration: %v\n", err)
		return 2
	}
	daemon.RouteLibraryLogs(log) // with REDLITE_LOG_FORMAT=json, every line is JSON
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg, daemon.Options{Logger: log}); err != nil {
		code, what := 1, "redlited"
		if errors.Is(err, daemon.ErrConfig) {
			code, what = 2, "redlited: invalid configuration"
		}
		if cfg.LogFormat == "json" {
			log.Error(what, "err", err, "exit_code", code)
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", what, err)
		}
		return code
	}
	return 0
}
