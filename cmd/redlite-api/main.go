// Command redlite-api is the HTTP API of Red Lite Batch: the native job API under /v1/jobs,
// OpenAI-compatible files, batches and chat completions, configured by REDLITE_*
// environment variables (docs/configuration.md lists them). Every instance keeps its state in Redis,
// so that several can run behind a load balancer. SIGTERM or SIGINT stop it gracefully.
//
// Exit status: 0 after a graceful stop, 2 for invalid configuration, 1 for other errors.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redlite/batch/api"
	"github.com/redlite/batch/internal/buildinfo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

func run(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, buildinfo.Get().Line("redlite-api"))
		return 0
	}
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: redlite-api [--version] (configured by REDLITE_* environment variables; see docs/configuration.md)")
		return 2
	}
	cfg, err := api.ConfigFromEnv(environ)
	if err != nil {
		fmt.Fprintf(stderr, "redlite-api: invalid configuration: %v\n", err)
		return 2
	}
	log, err := api.NewLogger(cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "redlite-api: invalid configuration: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := api.Run(ctx, cfg, api.Options{Logger: log}); err != nil {
		log.Error("redlite-api", "err", err)
		return 1
	}
	return 0
}
