package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redlite/batch/internal/envconf"
	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/jobs"
)

func init() {
	register(command{name: "enqueue", summary: "submit a summarize or generate job (--wait prints the result)", run: runEnqueue})
}

// jobsEnv is the CLI's share of the daemon's environment: the same Redis, and the retention
// and retries the jobs it enqueues get (asynq stores both in the task at enqueue time).
type jobsEnv struct {
	redisx.Env
	Retention time.Duration `env:"REDLITE_RESULT_RETENTION" envDefault:"24h"`
	MaxRetry  int           `env:"REDLITE_MAX_RETRY" envDefault:"3"`
	// The workers' REDLITE_WEBHOOK_ALLOW (jobs.WithWebhookAllow).
	jobs.WebhookEnv
}

// jobsFlags are the connection flags every job command takes.
type jobsFlags struct {
	redis  *string
	env    jobsEnv
	envErr error
}

func addJobsFlags(fs *flag.FlagSet) *jobsFlags {
	jf := &jobsFlags{}
	jf.env, jf.envErr = envconf.Parse[jobsEnv](os.Environ()) // errors name the variable
	// The flag's default stays empty: the flag package would print the URL, password and
	// all, in the help text.
	jf.redis = fs.String("redis", "", "Redis `URL` (default $REDLITE_REDIS_URL, else "+redisx.DefaultURL+")")
	return jf
}

// envError is a bad REDLITE_* variable: a bad setting, as a bad flag is (exit 2).
func (jf *jobsFlags) envError() error {
	if jf.envErr != nil {
		return usageErr("environment: %v", jf.envErr)
	}
	return nil
}

// tlsFiles are $REDLITE_REDIS_CA_FILE, _CERT_FILE and _KEY_FILE.
func (jf *jobsFlags) tlsFiles() jobs.TLSFiles { return jf.env.TLSFiles() }

// redisURL is --redis, else $REDLITE_REDIS_URL, else the default.
func (jf *jobsFlags) redisURL() string {
	if *jf.redis != "" {
		return *jf.redis
	}
	return jf.env.RedisURL
}

// open connects to Redis; the caller closes the client.
func (jf *jobsFlags) open(pollEvery time.Duration) (*jobs.Client, error) {
	if err := jf.envError(); err != nil {
		return nil, err
	}
	opts := []jobs.ClientOption{jobs.WithRetention(jf.env.Retention), jobs.WithMaxRetry(jf.env.MaxRetry), jobs.WithTLSFiles(jf.tlsFiles()),
		jobs.WithWebhookAllow(jf.env.WebhookAllow)}
	if pollEvery > 0 {
		opts = append(opts, jobs.WithPollInterval(pollEvery))
	}
	c, err := jobs.NewClient(jf.redisURL(), opts...)
	if err != nil {
		return nil, usageErr("--redis: %v", err)
	}
	return c, nil
}

func runEnqueue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fmt.Fprintln(stderr, "usage: redlite enqueue summarize|generate [flags]")
			for _, typ := range []string{jobs.TypeSummarize, jobs.TypeGenerate} {
				fmt.Fprintln(stderr)
				_ = runEnqueue(ctx, []string{typ, "-h"}, stdout, stderr) // prints its flags
			}
			return flag.ErrHelp
		}
		return usageErr("usage: redlite enqueue summarize|generate [flags]")
	}
	typ := args[0]
	if typ != jobs.TypeSummarize && typ != jobs.TypeGenerate {
		return usageErr("job type must be summarize or generate, got %q", typ)
	}
	fs := newFlags("enqueue "+typ, stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "redlite enqueue %s [flags]:\n", typ)
		fs.PrintDefaults()
	}
	jf := addJobsFlags(fs)
	file := fs.String("file", "", "read the whole payload (JSON, jobs/schema) from `F`, or - for stdin; other payload flags then override its fields")
	maxTokens := fs.Int("max-tokens", 0, "most tokens to generate (default: the job type's)")
	var metadata, priority, deadline, key, webhook, model string
	var timeout time.Duration
	fs.StringVar(&priority, "priority", "", "high, normal or low")
	fs.DurationVar(&timeout, "timeout", 0, "how long one attempt may run (whole seconds; default 1h)")
	fs.StringVar(&deadline, "deadline", "", "RFC 3339 time by which the job must be done")
	fs.StringVar(&key, "idempotency-key", "", "job id; enqueueing the same key twice gives one job")
	fs.StringVar(&metadata, "metadata", "", "JSON object echoed back in the result")
	fs.StringVar(&webhook, "webhook-url", "", "URL that receives the result by POST")
	fs.StringVar(&model, "model", "", "model the job wants (default: the worker's)")
	// The same names as redlite generate's; the format is compiled (and an unsupported
	// schema keyword refused) by the payload's Validate before anything is enqueued.
	schemaFile := fs.String("json-schema", "", "constrain the output to JSON valid against the JSON Schema in `file` (response_format json_schema)")
	jsonObject := fs.Bool("json-object", false, "constrain the output to a JSON object (response_format json_object)")
	anyway := fs.Bool("anyway", false, "enqueue even when no live worker serves the model or can hold the job (for workers not started yet)")
	wait := fs.Bool("wait", false, "wait for the job and print its result")
	asJSON := fs.Bool("json", false, "print JSON (the job on enqueue, the result with --wait)")
	waitFor := fs.Duration("wait-timeout", 0, "give up waiting after this long (0: no limit)")

	// Type-specific flags.
	var input, inputFile, style, length, language, focus, strategy string
	var overlap int
	var prompt, system, user string
	// Optional numbers: unset means the payload's default, which the usage text states
	// once (a -1 sentinel would print as a second, wrong default).
	var temperature, topP, minP optFloat
	var topK, seed, logprobs optInt
	var repPenalty, presPenalty, freqPenalty optFloat
	var stops stringList
	var thinking bool
	if typ == jobs.TypeSummarize {
		fs.StringVar(&input, "input", "", "the document `text`")
		fs.StringVar(&inputFile, "input-file", "", "read the document from `F`, or - for stdin")
		fs.StringVar(&style, "style", "", "paragraphs, bullets or one_sentence")
		fs.StringVar(&length, "length", "", "length, e.g. \"about 150 words\"")
		fs.StringVar(&language, "language", "", "language of the summary")
		fs.StringVar(&focus, "focus", "", "what the summary should concentrate on")
		fs.StringVar(&strategy, "strategy", "", "auto (default: one pass if the document fits, else hierarchical), single or hierarchical")
		fs.IntVar(&overlap, "overlap", 0, "tokens of the preceding text each piece of a hierarchical summary repeats")
	} else {
		fs.StringVar(&prompt, "prompt", "", "raw prompt to continue (no chat template)")
		fs.StringVar(&system, "system", "", "system message")
		fs.StringVar(&user, "user", "", "user message (rendered with the model's chat template)")
		fs.Var(&temperature, "temperature", "sampling temperature, a `number`; 0 is greedy (default 0.7)")
		fs.Var(&topP, "top-p", "nucleus sampling, a `number` in (0, 1] (default 0.8)")
		fs.Var(&topK, "top-k", "top-k sampling, an `integer`; 0 is off (default 20)")
		fs.Var(&minP, "min-p", "min-p sampling, a `number` in [0, 1] (default 0)")
		fs.Var(&seed, "seed", "sampling seed, an `integer` (default: the worker picks one)")
		fs.Var(&stops, "stop", "stop `string` (repeatable)")
		fs.BoolVar(&thinking, "thinking", false, "let a thinking model reason first (enable_thinking; the reasoning comes back apart from the text)")
		fs.Var(&logprobs, "logprobs", "return each token's logprob and its `N` most likely alternatives (0–20) in the result")
		fs.Var(&repPenalty, "repetition-penalty", "divide the logits of generated tokens, a `number` (default 1: off)")
		fs.Var(&presPenalty, "presence-penalty", "subtract from the logits of generated tokens, a `number` in [-2, 2] (default 0)")
		fs.Var(&freqPenalty, "frequency-penalty", "subtract per occurrence from the logits of generated tokens, a `number` in [-2, 2] (default 0)")
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var p jobs.Payload
	if *file != "" {
		data, err := readArg(*file)
		if err != nil {
			return err
		}
		if p, err = jobs.Decode(typ, data); err != nil {
			return fmt.Errorf("--file %s: %w", *file, err)
		}
	} else if typ == jobs.TypeSummarize {
		p = &jobs.Summarize{Version: jobs.Version}
	} else {
		p = &jobs.Generate{Version: jobs.Version}
	}

	var format *jobs.ResponseFormat
	switch {
	case *schemaFile != "" && *jsonObject:
		return usageErr("give at most one of --json-schema and --json-object")
	case *schemaFile != "":
		data, err := readArg(*schemaFile)
		if err != nil {
			return err
		}
		format = &jobs.ResponseFormat{Type: jobs.FormatJSONSchema, JSONSchema: &jobs.JSONSchema{Schema: data}}
	case *jsonObject:
		format = &jobs.ResponseFormat{Type: jobs.FormatJSONObject}
	}

	switch p := p.(type) {
	case *jobs.Summarize:
		if format != nil {
			p.ResponseFormat = format
		}
		if set["input-file"] {
			data, err := readArg(inputFile)
			if err != nil {
				return err
			}
			p.Input = string(data)
		} else if set["input"] {
			p.Input = input
		}
		if p.Input == "" {
			return usageErr("give the document with --input, --input-file or --file")
		}
		if set["style"] || set["length"] || set["language"] || set["focus"] {
			if p.Instructions == nil {
				p.Instructions = &jobs.Instructions{}
			}
			setIf(set["style"], &p.Instructions.Style, style)
			setIf(set["length"], &p.Instructions.Length, length)
			setIf(set["language"], &p.Instructions.Language, language)
			setIf(set["focus"], &p.Instructions.Focus, focus)
		}
		if set["max-tokens"] {
			p.MaxTokens = maxTokens
		}
		if set["strategy"] {
			p.Strategy = jobs.Strategy(strategy)
		}
		if set["overlap"] {
			p.Overlap = &overlap
		}
		if err := applyCommon(&p.Common, set, priority, deadline, key, metadata, webhook, model, timeout); err != nil {
			return err
		}
	case *jobs.Generate:
		if set["prompt"] {
			p.Prompt, p.Messages = prompt, nil
		}
		if set["system"] || set["user"] {
			p.Prompt, p.Messages = "", nil
			if system != "" {
				p.Messages = append(p.Messages, jobs.Message{Role: jobs.RoleSystem, Content: system})
			}
			p.Messages = append(p.Messages, jobs.Message{Role: jobs.RoleUser, Content: user})
		}
		if p.Prompt == "" && len(p.Messages) == 0 {
			return usageErr("give --prompt, or --user (and --system), or --file")
		}
		if set["max-tokens"] {
			p.MaxTokens = maxTokens
		}
		if set["temperature"] {
			p.Temperature = &temperature.v
		}
		if set["top-p"] {
			p.TopP = &topP.v
		}
		if set["top-k"] {
			k := int(topK.v)
			p.TopK = &k
		}
		if set["min-p"] {
			p.MinP = &minP.v
		}
		if set["seed"] {
			p.Seed = &seed.v
		}
		if set["stop"] {
			p.Stop = stops
		}
		if set["thinking"] {
			p.EnableThinking = &thinking
		}
		if format != nil {
			p.ResponseFormat = format
		}
		if set["logprobs"] {
			yes, n := true, int(logprobs.v)
			p.Logprobs, p.TopLogprobs = &yes, &n
		}
		if set["repetition-penalty"] {
			p.RepetitionPenalty = &repPenalty.v
		}
		if set["presence-penalty"] {
			p.PresencePenalty = &presPenalty.v
		}
		if set["frequency-penalty"] {
			p.FrequencyPenalty = &freqPenalty.v
		}
		if err := applyCommon(&p.Common, set, priority, deadline, key, metadata, webhook, model, timeout); err != nil {
			return err
		}
	}
	if err := p.Validate(); err != nil {
		return usageErr("%v", err)
	}

	c, err := jf.open(0)
	if err != nil {
		return err
	}
	defer c.Close()
	var eopts []jobs.EnqueueOption
	if *anyway {
		eopts = append(eopts, jobs.EnqueueAnyway())
	}
	job, err := c.Enqueue(ctx, p, eopts...)
	switch {
	case errors.Is(err, jobs.ErrDuplicate):
		fmt.Fprintf(stderr, "redlite enqueue: %v; following the existing job\n", err)
	case errors.Is(err, jobs.ErrBadPayload):
		// What only Enqueue can check (a webhook's address, a deadline passed meanwhile) is
		// a payload error like the others: exit 2.
		return usageErr("%v", err)
	case err != nil:
		return err
	}
	if !*wait {
		if *asJSON {
			return writeJSON(stdout, map[string]string{"id": job.ID, "queue": job.Queue, "type": job.Type})
		}
		fmt.Fprintln(stdout, job.ID)
		return nil
	}
	fmt.Fprintf(stderr, "job %s enqueued on %s\n", job.ID, job.Queue)
	return waitAndPrint(ctx, c, job.ID, *waitFor, *asJSON, stdout, stderr)
}

// optFloat and optInt are numeric flags without a default of their own: unset, they print
// no "(default …)" in the help.
type optFloat struct {
	v   float64
	set bool
}

func (o *optFloat) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatFloat(o.v, 'g', -1, 64)
}

func (o *optFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("not a number")
	}
	o.v, o.set = v, true
	return nil
}

type optInt struct {
	v   int64
	set bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatInt(o.v, 10)
}

func (o *optInt) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("not an integer")
	}
	o.v, o.set = v, true
	return nil
}

func setIf(ok bool, dst *string, v string) {
	if ok {
		*dst = v
	}
}

// applyCommon sets the fields of both payload types from the flags that were given.
func applyCommon(c *jobs.Common, set map[string]bool, priority, deadline, key, metadata, webhook, model string, timeout time.Duration) error {
	if set["priority"] {
		c.Priority = jobs.Priority(priority)
	}
	if set["timeout"] {
		if timeout < time.Second || timeout%time.Second != 0 {
			return usageErr("--timeout must be whole seconds, at least 1s, got %v", timeout)
		}
		c.Timeout = int(timeout / time.Second)
	}
	if set["deadline"] {
		d, err := time.Parse(time.RFC3339, deadline)
		if err != nil {
			return usageErr("--deadline: want an RFC 3339 time like 2025-06-01T12:00:00Z, got %q", deadline)
		}
		if !d.After(time.Now()) {
			return usageErr("--deadline %s is not in the future", deadline)
		}
		c.Deadline = &d
	}
	setIf(set["idempotency-key"], &c.IdempotencyKey, key)
	if set["metadata"] {
		c.Metadata = json.RawMessage(metadata)
	}
	setIf(set["webhook-url"], &c.WebhookURL, webhook)
	setIf(set["model"], &c.Model, model)
	return nil
}

// readArg reads a file, or stdin for "-".
func readArg(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(os.Stdin, jobs.MaxPayloadBytes+1))
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// waitAndPrint waits for a job, showing its progress on stderr, and prints its result: the
// text, or the whole result as JSON.
func waitAndPrint(ctx context.Context, c *jobs.Client, id string, limit time.Duration, asJSON bool, stdout, stderr io.Writer) error {
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	pr := newProgressLine(stderr)
	res, err := c.Wait(ctx, id, pr.show)
	pr.end()
	if err != nil {
		var je *jobs.JobError
		if errors.As(err, &je) && asJSON && res.FinishReason != "" {
			writeJSON(stdout, res)
		}
		return err
	}
	if asJSON {
		return writeJSON(stdout, res)
	}
	fmt.Fprintln(stdout, res.Text)
	fmt.Fprintf(stderr, "finish: %s; %d prompt + %d generated tokens; prefill %.0f tok/s, decode %.0f tok/s; plan: %s KV, %d-token chunks, %d/%d MiB; %s on %s\n",
		res.FinishReason, res.Usage.PromptTokens, res.Usage.CompletionTokens, res.Timings.PrefillTokensPerSecond,
		res.Timings.DecodeTokensPerSecond, res.Plan.KVPrecision, res.Plan.Chunk, res.Plan.NeedMiB, res.Plan.LimitMiB, res.Model, res.Worker)
	printTree(stderr, res)
	return nil
}

// progressLine shows a waiting job's progress on one line of a terminal (rewritten in
// place), or as one line per phase elsewhere so that logs stay short.
type progressLine struct {
	w     io.Writer
	tty   bool
	start time.Time // when the wait began
	last  jobs.Phase
	shown bool
}

func newProgressLine(w io.Writer) *progressLine {
	return &progressLine{w: w, tty: isTerminal(w), start: time.Now()}
}

func (p *progressLine) show(pr jobs.Progress) {
	line := string(pr.Phase)
	switch pr.Phase {
	case jobs.PhasePrefill:
		line = fmt.Sprintf("prefill %d/%d prompt tokens", pr.Prefilled, pr.PromptTokens)
	case jobs.PhaseDecode:
		line = fmt.Sprintf("decode %d/%d tokens", pr.Generated, pr.MaxTokens)
	case jobs.PhaseMap, jobs.PhaseReduce:
		line = fmt.Sprintf("%s (level %d): %d/%d pieces done", pr.Phase, pr.Level, pr.PiecesDone, pr.PiecesTotal)
	}
	line += fmt.Sprintf(", %s elapsed", time.Since(p.start).Round(100*time.Millisecond))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.shown = true
		return
	}
	if pr.Phase != p.last {
		fmt.Fprintln(p.w, line)
		p.last = pr.Phase
	}
}

func (p *progressLine) end() {
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
