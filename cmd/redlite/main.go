// Command redlite is the command-line tool of Red Lite Batch: it submits and inspects jobs,
// and runs the engine and the planner locally (logits, tokenize, info, generate, bench, synth,
// plan).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/internal/buildinfo"
)

// A command is one subcommand. Each lives in its own file and registers itself in init.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("redlite: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// errUsage marks errors caused by bad arguments; main exits 2 for them.
var errUsage = errors.New("usage")

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

func main() { os.Exit(runMain(os.Args[1:])) }

// runMain is the process around run: signals, and the libraries' own loggers.
func runMain(args []string) int {
	// go-redis logs through its own logger, straight to stderr, from inside the library:
	// sentinel.go announces each primary it selects and every sentinel it fails to reach
	// during a failover. The CLI's stderr is for its own messages; every Redis failure that
	// matters reaches the command as an error. Process-wide, hence here and not in run.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, os.Stdout, os.Stderr)
}

// quietLogger drops what go-redis logs by itself.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" || args[0] == "version" {
		fmt.Fprintln(stdout, buildinfo.Get().Line("redlite"))
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "redlite: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return 2
	}
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "redlite %s: %v\n", c.name, err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: redlite <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nrun 'redlite <command> -h' for a command's flags, 'redlite --version' for the build")
}

// newFlags makes a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("redlite "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args and wraps bad flags as usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%v", err)
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// isTerminal says whether w is a terminal (a character device), where progress may rewrite
// one line in place; pipes, files and buffers get whole lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
