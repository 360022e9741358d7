package redistest

import (
	"fmt"
	"os"
	"testing"
)

// StartMain starts a server from a TestMain, where there is no *testing.T: for a package's
// runnable examples, which take none. stop stops it and removes its directory; call it
// after m.Run. A failure is returned instead of failing a test.
func StartMain(opts ...Option) (s *Server, stop func(), err error) {
	tb := &mainTB{}
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(mainFatal)
			if !ok {
				panic(p)
			}
			tb.cleanup()
			s, stop, err = nil, nil, f
		}
	}()
	s = Start(tb, opts...)
	return s, tb.cleanup, nil
}

// mainTB is the part of testing.TB that Start and a Server use, outside a test. The
// embedded interface is nil: a method it does not override would panic, which the tests
// of this package would catch.
type mainTB struct {
	testing.TB
	dirs     []string
	cleanups []func()
}

type mainFatal struct{ error }

func (m *mainTB) Helper() {}
func (m *mainTB) Cleanup(f func()) {
	m.cleanups = append(m.cleanups, f)
}
func (m *mainTB) TempDir() string {
	d, err := os.MkdirTemp("", "redistest-*")
	if err != nil {
		panic(mainFatal{err})
	}
	m.dirs = append(m.dirs, d)
	return d
}
func (m *mainTB) Fatal(args ...any)                 { panic(mainFatal{fmt.Errorf("%s", fmt.Sprint(args...))}) }
func (m *mainTB) Fatalf(format string, args ...any) { panic(mainFatal{fmt.Errorf(format, args...)}) }
func (m *mainTB) Skip(args ...any)                  { m.Fatal(args...) }
func (m *mainTB) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "redistest: "+format+"\n", args...)
}
func (m *mainTB) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (m *mainTB) cleanup() {
	for i := len(m.cleanups) - 1; i >= 0; i-- {
		m.cleanups[i]()
	}
	m.cleanups = nil
	for _, d := range m.dirs {
		os.RemoveAll(d)
	}
	m.dirs = nil
}
