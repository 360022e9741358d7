package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/redlite/batch/internal/dashboard"
)

func init() {
	register(command{name: "dashboard", summary: "serve asynqmon (queues, jobs, payloads, results) and the fleet page (workers, capacity buckets, running jobs' progress) in-process", run: runDashboard})
}

func runDashboard(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dashboard", stderr)
	jf := addJobsFlags(fs)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	readOnly := fs.Bool("read-only", false, "hide the buttons that delete, archive or run tasks")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := jf.envError(); err != nil {
		return err
	}
	d, err := dashboard.New(jf.redisURL(), jf.tlsFiles(), "", *readOnly)
	if err != nil {
		return usageErr("--redis: %v", err)
	}
	defer d.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "asynqmon at http://%s/, the fleet at http://%s%s (Ctrl-C stops it)\n", ln.Addr(), ln.Addr(), dashboard.FleetPath)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
