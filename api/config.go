package api

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redlite/batch/internal/envconf"
	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/jobs"
)

// Config is redlite-api's configuration, read from REDLITE_* environment variables. Every
// default is in the envDefault tag and in docs/configuration.md; an empty variable means the default.
type Config struct {
	// The Redis connection: REDLITE_REDIS_URL and its TLS files (the daemon's).
	redisx.Env

	// Addr is the listen address of the API.
	Addr string `env:"REDLITE_API_ADDR" envDefault:":8080"`
	// Tokens are the accepted bearer tokens, comma-separated, in clear.
	Tokens []string `env:"REDLITE_API_TOKENS" envSeparator:","`
	// TokensFile holds one token per line as "sha256:<64 hex digits>" (the SHA-256 of the
	// token) or the token in clear, optionally followed by a space and a name; # starts a
	// comment. With neither Tokens nor TokensFile the API refuses to start.
	TokensFile string `env:"REDLITE_API_TOKENS_FILE"`

	// MaxBodyBytes bounds a JSON request body (a job payload is at most 8 MiB).
	MaxBodyBytes int64 `env:"REDLITE_API_MAX_BODY_BYTES" envDefault:"9437184"`
	// MaxFileBytes bounds an uploaded batch input file (OpenAI's limit: 200 MB).
	MaxFileBytes int64 `env:"REDLITE_API_MAX_FILE_BYTES" envDefault:"209715200"`
	// RateLimit is the requests per second one token may make, counted across every API
	// instance in Redis; 0 turns the limit off.
	RateLimit int `env:"REDLITE_API_RATE_LIMIT" envDefault:"100"`
	// MaxQueuedJobs is how many submitted, unfinished jobs (POST /v1/jobs and chat
	// completions) one token may have; 0 turns the limit off. Batch requests are bounded by
	// the batch size instead.
	MaxQueuedJobs int `env:"REDLITE_API_MAX_QUEUED_JOBS" envDefault:"1000"`
	// MaxStoredBytes is how many bytes of files one token may keep stored (its uploads and
	// its batches' output and error files, all held in Redis); an upload that would pass it
	// is refused (413 storage_quota_exceeded) until the token deletes files. Output files are
	// always written, and count. 0 turns the limit off.
	MaxStoredBytes int64 `env:"REDLITE_API_MAX_STORED_BYTES" envDefault:"1073741824"`
	// MaxQueuedBatches is how many batches not yet in a final status (validating,
	// in_progress, finalizing, cancelling) one token may have; 0 turns the limit off.
	MaxQueuedBatches int `env:"REDLITE_API_MAX_QUEUED_BATCHES" envDefault:"20"`
	// MaxWait caps a long poll (?wait= of GET /v1/jobs/{id}/result) and how long a
	// synchronous chat completion waits for its job.
	MaxWait time.Duration `env:"REDLITE_API_MAX_WAIT" envDefault:"10m"`
	// CORSOrigins lists the origins allowed to call the API from a browser; empty (the
	// default) sends no CORS headers at all.
	CORSOrigins []string `env:"REDLITE_API_CORS_ORIGINS" envSeparator:","`
	// BatchInterval is how often an instance looks at the jobs of unfinished batches.
	BatchInterval time.Duration `env:"REDLITE_API_BATCH_INTERVAL" envDefault:"1s"`
	// PollInterval is how often a waiting request (long poll, events, chat completion)
	// looks at its job.
	PollInterval time.Duration `env:"REDLITE_API_POLL_INTERVAL" envDefault:"250ms"`
	// StreamPollInterval is how often a stream that carries text (job events, chat
	// completions with stream: true) looks at its job's status (one HGETALL) while it blocks
	// on the job's text stream: the text comes as the workers write it, without waiting for
	// this; progress events, and the end of a job that wrote no end entry (failed, cancelled
	// while queued, its worker lost), come within it.
	StreamPollInterval time.Duration `env:"REDLITE_API_STREAM_POLL_INTERVAL" envDefault:"250ms"`

	// The workers' REDLITE_WEBHOOK_SECRET (GET /v1/webhook_secret tells each token the
	// secret its jobs' webhooks are signed with) and REDLITE_WEBHOOK_ALLOW (a webhook_url
	// on another internal address gets a 400).
	jobs.WebhookEnv

	// REDLITE_LOG_FORMAT and REDLITE_LOG_LEVEL.
	envconf.Log
}

// ConfigFromEnv reads the configuration from environ (os.Environ() form), fills defaults,
// reads the tokens file and validates. Errors name the variable.
func ConfigFromEnv(environ []string) (Config, error) {
	cfg, err := envconf.Parse[Config](environ)
	if err != nil {
		return Config{}, err
	}
	return cfg, cfg.Validate()
}

// Validate reports the first setting that cannot work, naming its variable.
func (c Config) Validate() error {
	bad := func(name, format string, args ...any) error {
		return fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
	}
	if _, err := c.URL(); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return bad("REDLITE_API_ADDR", "want host:port or :port, got %q: %v", c.Addr, err)
	}
	switch {
	case c.MaxBodyBytes < 1024:
		return bad("REDLITE_API_MAX_BODY_BYTES", "must be at least 1024, got %d", c.MaxBodyBytes)
	case c.MaxFileBytes < 1024:
		return bad("REDLITE_API_MAX_FILE_BYTES", "must be at least 1024, got %d", c.MaxFileBytes)
	case c.RateLimit < 0:
		return bad("REDLITE_API_RATE_LIMIT", "must be ≥ 0 (0: off), got %d", c.RateLimit)
	case c.MaxQueuedJobs < 0:
		return bad("REDLITE_API_MAX_QUEUED_JOBS", "must be ≥ 0 (0: off), got %d", c.MaxQueuedJobs)
	case c.MaxStoredBytes < 0:
		return bad("REDLITE_API_MAX_STORED_BYTES", "must be ≥ 0 (0: off), got %d", c.MaxStoredBytes)
	case c.MaxQueuedBatches < 0:
		return bad("REDLITE_API_MAX_QUEUED_BATCHES", "must be ≥ 0 (0: off), got %d", c.MaxQueuedBatches)
	case c.MaxWait < time.Second:
		return bad("REDLITE_API_MAX_WAIT", "must be at least 1s, got %v", c.MaxWait)
	case c.BatchInterval <= 0:
		return bad("REDLITE_API_BATCH_INTERVAL", "must be > 0, got %v", c.BatchInterval)
	case c.PollInterval <= 0:
		return bad("REDLITE_API_POLL_INTERVAL", "must be > 0, got %v", c.PollInterval)
	case c.StreamPollInterval <= 0:
		return bad("REDLITE_API_STREAM_POLL_INTERVAL", "must be > 0, got %v", c.StreamPollInterval)
	}
	for i, t := range c.Tokens {
		if strings.TrimSpace(t) == "" {
			return bad("REDLITE_API_TOKENS", "token %d is empty", i+1)
		}
	}
	if _, err := c.tokenHashes(); err != nil {
		return err
	}
	for _, o := range c.CORSOrigins {
		if o != "*" && !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") {
			return bad("REDLITE_API_CORS_ORIGINS", "want origins like https://app.example.com or *, got %q", o)
		}
	}
	if _, err := c.Secret(); err != nil {
		return err
	}
	return c.Log.Check()
}

// HashToken is what a tokens file holds for token: "sha256:" and the hex SHA-256.
func HashToken(token string) string {
	s := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(s[:])
}

// tokenHashes is every accepted token as a SHA-256 digest, from both variables. Only
// digests are kept in memory after start, and compared in constant time.
func (c Config) tokenHashes() ([][sha256.Size]byte, error) {
	var out [][sha256.Size]byte
	for _, t := range c.Tokens {
		out = append(out, sha256.Sum256([]byte(strings.TrimSpace(t))))
	}
	if c.TokensFile != "" {
		data, err := os.ReadFile(c.TokensFile)
		if err != nil {
			return nil, fmt.Errorf("REDLITE_API_TOKENS_FILE: %w", err)
		}
		hs, err := parseTokensFile(data)
		if err != nil {
			return nil, fmt.Errorf("REDLITE_API_TOKENS_FILE %s: %w", c.TokensFile, err)
		}
		out = append(out, hs...)
	}
	if len(out) == 0 {
		return nil, errors.New("REDLITE_API_TOKENS, REDLITE_API_TOKENS_FILE: no tokens; set at least one (every request needs a bearer token)")
	}
	return out, nil
}

// parseTokensFile reads a tokens file (see Config.TokensFile). Errors give the line number
// but never the line: it may be a token.
func parseTokensFile(data []byte) ([][sha256.Size]byte, error) {
	var out [][sha256.Size]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		tok, _, _ := strings.Cut(line, " ")
		if hexd, ok := strings.CutPrefix(tok, "sha256:"); ok {
			b, err := hex.DecodeString(hexd)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("line %d: after sha256: want 64 hex digits", n)
			}
			out = append(out, [sha256.Size]byte(b))
			continue
		}
		out = append(out, sha256.Sum256([]byte(tok)))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return out, nil
}
