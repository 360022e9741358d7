// Package redistest runs a real redis-server as a child process for tests: on a free loopback
// port (never 6379), in a temporary directory, without persistence unless asked.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"github.com/redlite/batch/internal/testlog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Readiness is polled, not slept on: the first probes come quickly (redis usually answers in
// a few milliseconds) and back off to pollMax, until startTimeout.
const (
	startTimeout = 15 * time.Second
	pollMin      = 2 * time.Millisecond
	pollMax      = 100 * time.Millisecond
	stopTimeout  = 15 * time.Second
	// bindAttempts bounds how often Start picks a new port when another process took the
	// one it chose between probing and redis binding it.
	bindAttempts = 5
	// defaultPort is the port a developer's own Redis listens on; tests never touch it.
	defaultPort = 6379
)

// Server is one redis-server child process. Its methods are safe to call from one test
// goroutine at a time; they fail the test (t.Fatal) on error.
type Server struct {
	t       testing.TB
	bin     string
	dir     string
	port    int
	aof     bool
	pass    string
	args    []string
	tls     *TLSFiles
	tlsPort int
	// sentinelConf makes the server a Redis Sentinel with this configuration.
	sentinelConf string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error
	log     *testlog.Buffer
}

// Option configures Start.
type Option func(*Server)

// WithAOF turns on append-only-file persistence with an fsync after every write, so that
// data survives Stop, Kill and Restart (the default has no persistence at all).
func WithAOF() Option { return func(s *Server) { s.aof = true } }

// WithPassword makes the server require password (requirepass) from every client.
func WithPassword(password string) Option { return func(s *Server) { s.pass = password } }

// WithArgs adds redis-server command-line options, e.g. "--maxmemory", "2mb".
func WithArgs(args ...string) Option { return func(s *Server) { s.args = append(s.args, args...) } }

// Start starts redis-server and waits until it answers PING. It is stopped in t.Cleanup.
// When redis-server is not on PATH the test fails under CI=true and is skipped otherwise.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found on PATH (install it, e.g. apt-get install redis-server or brew install redis)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	for _, o := range opts {
		o(s)
	}
	t.Cleanup(s.Stop)

	var lastErr error
	for range bindAttempts {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.port, s.tlsPort = port, 0
		if lastErr = s.start(); lastErr == nil {
			return s
		}
		if !errors.Is(lastErr, errBind) {
			break
		}
	}
	t.Fatalf("redistest: %v", lastErr)
	return nil
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the TCP port of the server.
func (s *Server) Port() int { return s.port }

// URL is a redis:// URL that selects database db (with the password of WithPassword).
func (s *Server) URL(db int) string {
	if s.pass != "" {
		return fmt.Sprintf("redis://:%s@%s/%d", url.PathEscape(s.pass), s.Addr(), db)
	}
	return fmt.Sprintf("redis://%s/%d", s.Addr(), db)
}

// Dir is the server's working directory (where the AOF lives with WithAOF).
func (s *Server) Dir() string { return s.dir }

// Log returns what redis-server has written so far, for failure messages.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

// Running reports whether the child process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Stop shuts the server down with SIGTERM (redis then fsyncs its AOF, if any) and waits for
// it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.t.Helper()
	s.signal(syscall.SIGTERM)
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it to exit.
func (s *Server) Kill() {
	s.t.Helper()
	s.signal(syscall.SIGKILL)
}

// Pause stops the server's process (SIGSTOP) without ending it, as a hung or partitioned host
// would: it answers nothing until Resume.
func (s *Server) Pause() { s.t.Helper(); s.send(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.t.Helper(); s.send(syscall.SIGCONT) }

func (s *Server) send(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	if err := cmd.Process.Signal(sig); err != nil {
		s.t.Errorf("redistest: signal %v to redis-server (pid %d): %v", sig, cmd.Process.Pid, err)
	}
}

// Restart stops the server if it runs and starts it again on the same port and directory.
// Without WithAOF the new server starts empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	// The port was ours a moment ago; redis sets SO_REUSEADDR, so only another process
	// grabbing it in between can make this fail.
	if err := s.start(); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Errorf("redistest: signal %v to redis-server (pid %d): %v", sig, cmd.Process.Pid, err)
	}
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill()
		<-exited
		s.t.Errorf("redistest: redis-server (pid %d) ignored %v for %v; killed it", cmd.Process.Pid, sig, stopTimeout)
	}
}

var errBind = errors.New("port already in use")

func (s *Server) start() error {
	var args []string
	if s.sentinelConf != "" {
		// A sentinel rewrites its configuration file as it learns the topology.
		conf := filepath.Join(s.dir, "sentinel.conf")
		if _, err := os.Stat(conf); err != nil {
			if err := os.WriteFile(conf, []byte(s.sentinelConf), 0o644); err != nil {
				return err
			}
		}
		args = []string{conf, "--sentinel"}
	}
	args = append(args,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "notice",
	)
	switch {
	case s.sentinelConf != "":
	default:
		// A replica's first sync starts at once, not after Redis 7's 5 s wait for more replicas.
		args = append(args, "--repl-diskless-sync-delay", "0")
	}
	switch {
	case s.sentinelConf != "":
	case s.aof:
		args = append(args, "--save", "", "--appendonly", "yes", "--appendfsync", "always")
	default:
		args = append(args, "--save", "", "--appendonly", "no")
	}
	if s.pass != "" {
		args = append(args, "--requirepass", s.pass)
	}
	targs, err := s.tlsArgs()
	if err != nil {
		return err
	}
	args = append(args, targs...)
	args = append(args, s.args...)
	log := &testlog.Buffer{}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout = log
	cmd.Stderr = log
	if err := startChild(cmd); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.exited, s.log = cmd, exited, log
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(exited)
	}()

	deadline := time.Now().Add(startTimeout)
	delay := pollMin
	for {
		err := ping(s.Addr(), s.pass, pollMax)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			out := log.String()
			if bytes.Contains([]byte(out), []byte("Address already in use")) {
				return fmt.Errorf("redis-server on port %d: %w", s.port, errBind)
			}
			return fmt.Errorf("redis-server on port %d exited before answering PING (%v); its log:\n%s", s.port, s.exitErr(), out)
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING within %v (last error: %v); its log:\n%s", s.port, startTimeout, err, log.String())
		}
		delay = min(2*delay, pollMax)
	}
}

func (s *Server) exitErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitErr
}

// ping sends PING in RESP (after AUTH when password is set) and expects +PONG.
func ping(addr, password string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var cmd string
	if password != "" {
		cmd = fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password)
	}
	if _, err := c.Write([]byte(cmd + "*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	rd := bufio.NewReader(c)
	if password != "" {
		if line, err := rd.ReadString('\n'); err != nil {
			return err
		} else if line != "+OK\r\n" {
			return fmt.Errorf("AUTH answered %q", line)
		}
	}
	line, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		// -LOADING while an AOF is replayed: not ready yet.
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// freePort asks the kernel for an unused loopback port. Another process may take it before
// redis binds it; Start then tries another.
func freePort() (int, error) {
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port != defaultPort {
			return port, nil
		}
	}
	return 0, errors.New("find a free port: the kernel kept offering 6379")
}
