package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStart(t *testing.T) {
	s := Start(t)

	t.Run("AnswersOnLoopback", func(t *testing.T) {
		host, port, err := net.SplitHostPort(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if host != "127.0.0.1" {
			t.Errorf("host = %q, want 127.0.0.1", host)
		}
		if port == "6379" || port != strconv.Itoa(s.Port()) {
			t.Errorf("port = %s (Port() %d), want a free port other than 6379", port, s.Port())
		}
		if got := do(t, s.Addr(), "PING"); got != "PONG" {
			t.Errorf("PING = %q", got)
		}
	})
	t.Run("URL", func(t *testing.T) {
		if got, want := s.URL(3), "redis://"+s.Addr()+"/3"; got != want {
			t.Errorf("URL(3) = %q, want %q", got, want)
		}
	})
	t.Run("NoPersistence", func(t *testing.T) {
		if got := do(t, s.Addr(), "CONFIG", "GET", "save"); got != "save," {
			t.Errorf("CONFIG GET save = %q, want empty", got)
		}
		if got := do(t, s.Addr(), "CONFIG", "GET", "appendonly"); got != "appendonly,no" {
			t.Errorf("CONFIG GET appendonly = %q", got)
		}
		if got := do(t, s.Addr(), "CONFIG", "GET", "dir"); got != "dir,"+s.Dir() {
			t.Errorf("CONFIG GET dir = %q, want dir,%s", got, s.Dir())
		}
	})
}

func TestTwoServersGetDifferentPorts(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("both servers on %s", a.Addr())
	}
	do(t, a.Addr(), "SET", "k", "a")
	if got := do(t, b.Addr(), "EXISTS", "k"); got != "0" {
		t.Errorf("key written to a is visible in b: EXISTS = %s", got)
	}
}

func TestStop(t *testing.T) {
	s := Start(t)
	s.Stop()
	if s.Running() {
		t.Fatal("Running after Stop")
	}
	if _, err := tryDo(s.Addr(), "PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Stop() // a second Stop is harmless
}

func TestRestart(t *testing.T) {
	t.Run("WithoutAOFStartsEmpty", func(t *testing.T) {
		s := Start(t)
		addr := s.Addr()
		do(t, addr, "SET", "k", "v")
		s.Restart()
		if s.Addr() != addr {
			t.Fatalf("Addr changed from %s to %s", addr, s.Addr())
		}
		if got := do(t, addr, "EXISTS", "k"); got != "0" {
			t.Errorf("EXISTS k after restart = %s, want 0", got)
		}
	})
	t.Run("WithAOFKeepsData", func(t *testing.T) {
		s := Start(t, WithAOF())
		do(t, s.Addr(), "SET", "k", "v")
		s.Restart()
		if got := do(t, s.Addr(), "GET", "k"); got != "v" {
			t.Errorf("GET k after restart = %q, want v", got)
		}
	})
	t.Run("KillThenRestartWithAOF", func(t *testing.T) {
		s := Start(t, WithAOF())
		do(t, s.Addr(), "SET", "k", "v")
		s.Kill()
		if s.Running() {
			t.Fatal("Running after Kill")
		}
		if _, err := tryDo(s.Addr(), "PING"); err == nil {
			t.Fatal("PING answered after Kill")
		}
		s.Restart()
		if got := do(t, s.Addr(), "GET", "k"); got != "v" {
			t.Errorf("GET k after kill and restart = %q, want v (appendfsync always)", got)
		}
	})
}

// fakeTB records Skip and Fatal instead of ending the test, to test Start's behaviour
// without redis-server.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

type stopped struct{}

func (f *fakeTB) Skip(args ...any)  { f.skipped = fmt.Sprint(args...); panic(stopped{}) }
func (f *fakeTB) Fatal(args ...any) { f.failed = fmt.Sprint(args...); panic(stopped{}) }

func startCatching(f *fakeTB) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopped); !ok {
				panic(r)
			}
		}
	}()
	Start(f)
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())

	t.Run("SkipsOutsideCI", func(t *testing.T) {
		t.Setenv("CI", "")
		f := &fakeTB{TB: t}
		startCatching(f)
		if !strings.Contains(f.skipped, "redis-server not found") || f.failed != "" {
			t.Errorf("skipped %q, failed %q; want a skip naming redis-server", f.skipped, f.failed)
		}
	})
	t.Run("FailsUnderCI", func(t *testing.T) {
		t.Setenv("CI", "true")
		f := &fakeTB{TB: t}
		startCatching(f)
		if !strings.Contains(f.failed, "redis-server not found") || f.skipped != "" {
			t.Errorf("failed %q, skipped %q; want a failure naming redis-server", f.failed, f.skipped)
		}
	})
}

func do(t *testing.T, addr string, args ...string) string {
	t.Helper()
	got, err := tryDo(addr, args...)
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return got
}

// tryDo sends one command in RESP and returns the reply flattened to a string (array
// elements joined by commas).
func tryDo(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis error: %s", line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "(nil)", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		parts := make([]string, 0, n)
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
