package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlite/batch/daemon"
	"github.com/redlite/batch/jobs"
)

func init() {
	register(command{name: "demo", summary: "run a daemon and one sample summarize job end to end, then stop", run: runDemo})
}

// demoDocument is the sample job's input.
const demoDocument = `Red Lite Batch turns a fleet of Apple Silicon Macs into a batch inference service for long
documents. Clients put summarization and generation jobs into Redis; a daemon on every Mac pulls
them, plans the memory each job needs so that it fits the Mac's GPU limit, runs its own inference
engine, and writes the result back. Operators watch the queues in asynqmon and the fleet in
Prometheus. A job that cannot fit is refused at once with an explanation of what would fit; a
worker that dies loses no job, because the queue hands it to another worker.`

// redisStartTimeout bounds how long the demo waits for its own redis-server to answer.
const redisStartTimeout = 15 * time.Second

// The demo is a redlite command rather than a redlited flag: it is a client's view of the
// system (enqueue, watch progress, read the result) with a daemon run in-process for the
// occasion, and redlited stays a daemon configured only by its environment.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo", stderr)
	inputFile := fs.String("input-file", "", "summarize this file instead of the sample document (- for stdin)")
	maxTokens := fs.Int("max-tokens", 64, "most tokens the summary may have")
	verbose := fs.Bool("v", false, "show the daemon's log")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	doc := demoDocument
	if *inputFile != "" {
		b, err := readArg(*inputFile)
		if err != nil {
			return err
		}
		doc = string(b)
	}

	cfg, err := daemon.ConfigFromEnv(os.Environ())
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if os.Getenv("REDLITE_REDIS_URL") == "" {
		r, err := startRedis(ctx, stderr)
		if err != nil {
			return err
		}
		defer r.stop()
		cfg.RedisURL = r.url
	} else {
		fmt.Fprintf(stderr, "using the Redis at $REDLITE_REDIS_URL\n")
	}
	if os.Getenv("REDLITE_HTTP_ADDR") == "" {
		cfg.HTTPAddr = "127.0.0.1:0" // a running redlited may hold the default port
	}
	if cfg.Model == "" {
		fmt.Fprintln(stderr, "REDLITE_MODEL is not set: using the built-in tiny model. Its weights are random, so the\n"+
			"summary below is meaningless text; set REDLITE_MODEL=/path/to/model.gguf (e.g. a Qwen3 GGUF) for a real one.")
	}
	// The daemon's warnings (the default model's, above) would repeat what the demo says.
	level := slog.LevelError
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	d, err := daemon.New(cfg, daemon.Options{Logger: log})
	if err != nil {
		return err
	}
	defer d.Shutdown()
	if err := d.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "daemon running: model %s, metrics at http://%s/metrics\n", d.ModelName(), d.HTTPAddr())

	c, err := jobs.NewClient(cfg.RedisURL, jobs.WithPollInterval(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer c.Close()
	job, err := c.Enqueue(ctx, &jobs.Summarize{
		Input:        doc,
		Instructions: &jobs.Instructions{Style: jobs.StyleBullets, Length: "at most 3 bullets"},
		MaxTokens:    maxTokens,
		Common:       jobs.Common{Metadata: []byte(`{"source":"redlite demo"}`)},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "enqueued summarize job %s\n", job.ID)
	return waitAndPrint(ctx, c, job.ID, 0, true, stdout, stderr)
}

// demoRedis is a redis-server child process.
type demoRedis struct {
	cmd    *exec.Cmd
	dir    string
	url    string
	exited chan struct{}
	log    *bytes.Buffer
}

// startRedis starts redis-server on a free loopback port, without persistence, in a
// temporary directory.
func startRedis(ctx context.Context, stderr io.Writer) (*demoRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("REDLITE_REDIS_URL is not set and redis-server is not on PATH: install Redis " +
			"(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or set " +
			"REDLITE_REDIS_URL=redis://host:6379/0 to use a running one")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port for redis-server: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "redlite-demo-redis-")
	if err != nil {
		return nil, err
	}
	r := &demoRedis{dir: dir, exited: make(chan struct{}), log: &bytes.Buffer{},
		url: fmt.Sprintf("redis://127.0.0.1:%d/0", port)}
	r.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { r.cmd.Wait(); close(r.exited) }()
	c, err := jobs.NewClient(r.url)
	if err != nil {
		r.stop()
		return nil, err
	}
	defer c.Close()
	deadline := time.Now().Add(redisStartTimeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-r.exited:
			r.stop()
			return nil, fmt.Errorf("redis-server exited at start: %s", strings.TrimSpace(r.log.String()))
		case <-ctx.Done():
			r.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("redis-server did not answer within %v: %v", redisStartTimeout, err)
		}
	}
	fmt.Fprintf(stderr, "started redis-server on 127.0.0.1:%d (it stops with the demo)\n", port)
	return r, nil
}

func (r *demoRedis) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
	os.RemoveAll(r.dir)
}
