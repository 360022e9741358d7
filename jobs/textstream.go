package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/internal/redisx"
)

// TextStreamKey (Redis stream, expires TextStreamTTL after its last entry, TextStreamEndTTL
// after the end entry): the text of job id as its workers generate it, one entry per token
// or per small time slice (TextPiece). Readers block on it (XREAD BLOCK) instead of polling
// the job.
func TextStreamKey(id string) string { return "redlite:job:" + id + ":text" }

const (
	// TextStreamMaxLen bounds a text stream's entries (XADD MAXLEN ~, so a little more): a
	// reader that falls this far behind misses pieces (its delta says gap; the result has
	// the whole text). At one entry per token that is the last ~10,000 tokens.
	TextStreamMaxLen = 10000
	// TextStreamTTL is how long a text stream outlives its last entry: a worker that died
	// mid-job leaves no stream behind for long.
	TextStreamTTL = 10 * time.Minute
	// TextStreamEndTTL is how long it outlives its end entry: once the result is written a
	// reader takes the rest from the result.
	TextStreamEndTTL = time.Minute
	// textReadCount bounds the entries one XREAD returns.
	textReadCount = 512
)

// TextPiece is one entry of a job's text stream: the text one attempt of the job released
// since its last entry (UTF-8-safe, never a stop string), with its byte offsets in that
// attempt's answer and reasoning, so that a reader knows what it has, what it missed and
// what a retry repeats.
type TextPiece struct {
	ID      string // the stream entry's id; set by ReadText
	Attempt int    // the attempt: failed attempts before it (asynq's retry count)

	Text            string
	TextOffset      int
	Reasoning       string
	ReasoningOffset int
	Generated       int // tokens generated so far
	// End, on the attempt's last entry, is its finish reason: the attempt wrote its result
	// (or, "cancelled", its partial result) before this entry.
	End FinishReason
}

// Field names of a stream entry, short: there is one entry per token.
const (
	fieldAttempt   = "a"
	fieldText      = "t"
	fieldTextOff   = "to"
	fieldReasoning = "r"
	fieldReasOff   = "ro"
	fieldGenerated = "n"
	fieldEnd       = "end"
)

func (p TextPiece) values() []any {
	v := []any{fieldAttempt, p.Attempt, fieldGenerated, p.Generated}
	if p.Text != "" {
		v = append(v, fieldText, p.Text, fieldTextOff, p.TextOffset)
	}
	if p.Reasoning != "" {
		v = append(v, fieldReasoning, p.Reasoning, fieldReasOff, p.ReasoningOffset)
	}
	if p.End != "" {
		v = append(v, fieldEnd, string(p.End))
	}
	return v
}

// pieceOf decodes an entry; fields it does not know are left alone (a newer worker's).
func pieceOf(m redis.XMessage) (TextPiece, error) {
	p := TextPiece{ID: m.ID}
	num := func(f string) (int, error) {
		v, ok := m.Values[f]
		if !ok {
			return 0, nil
		}
		s, _ := v.(string)
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("text stream entry %s: field %s is %q, want a count", m.ID, f, s)
		}
		return n, nil
	}
	var err error
	if p.Attempt, err = num(fieldAttempt); err != nil {
		return p, err
	}
	if p.Generated, err = num(fieldGenerated); err != nil {
		return p, err
	}
	if p.TextOffset, err = num(fieldTextOff); err != nil {
		return p, err
	}
	if p.ReasoningOffset, err = num(fieldReasOff); err != nil {
		return p, err
	}
	p.Text, _ = m.Values[fieldText].(string)
	p.Reasoning, _ = m.Values[fieldReasoning].(string)
	end, _ := m.Values[fieldEnd].(string)
	p.End = FinishReason(end)
	return p, nil
}

// AppendText adds pieces to job id's text stream in one round trip: an entry each (XADD
// MAXLEN ~ TextStreamMaxLen), and the stream's expiry (TextStreamTTL, or TextStreamEndTTL
// once a piece ends the attempt).
func (c *Client) AppendText(ctx context.Context, id string, pieces ...TextPiece) error {
	if len(pieces) == 0 {
		return nil
	}
	key := TextStreamKey(id)
	ttl := TextStreamTTL
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, pc := range pieces {
			p.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: TextStreamMaxLen, Approx: true, Values: pc.values()})
			if pc.End != "" {
				ttl = TextStreamEndTTL
			}
		}
		p.Expire(ctx, key, ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("append to the text stream of job %s: %w", id, redisx.Classify(err))
	}
	return nil
}

// ReadText returns the entries of job id's text stream after entry after ("" or "0": from
// the start), waiting up to block for one to come (XREAD BLOCK, so block > 0: a missing
// stream is waited on like an empty one). None within block is no error.
func (c *Client) ReadText(ctx context.Context, id, after string, block time.Duration) ([]TextPiece, error) {
	if after == "" {
		after = "0"
	}
	res, err := c.streamRdb().XRead(ctx, &redis.XReadArgs{Streams: []string{TextStreamKey(id), after}, Count: textReadCount, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the text stream of job %s: %w", id, redisx.Classify(err))
	}
	var out []TextPiece
	for _, s := range res {
		for _, m := range s.Messages {
			p, err := pieceOf(m)
			if err != nil {
				return out, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// streamRdb is the connection pool for blocking reads (WithStreamRedis).
func (c *Client) streamRdb() redis.UniversalClient {
	if c.cfg.streamRdb != nil {
		return c.cfg.streamRdb
	}
	return c.rdb
}

// WithStreamRedis gives ReadText and FollowText their own connection pool: each blocked
// read holds a connection for its whole wait, and a server with many readers would
// otherwise take every connection of the pool it shares with everything else.
func WithStreamRedis(rdb redis.UniversalClient) ClientOption {
	return func(c *clientConfig) { c.streamRdb = rdb }
}

// TextCursor is how far a reader of a job's text got: the last stream entry read, the
// attempt it follows and the bytes of answer and reasoning it has. Its String form is the
// SSE event id that GET /v1/jobs/{id}/events sends, and Last-Event-ID gives back.
type TextCursor struct {
	Entry     string // the stream entry's id; "" before any
	Attempt   int
	Text      int
	Reasoning int
}

// String is "attempt.text.reasoning.entry" ("0.120.0.1765110000000-3").
func (c TextCursor) String() string {
	return fmt.Sprintf("%d.%d.%d.%s", c.Attempt, c.Text, c.Reasoning, c.Entry)
}

// ParseTextCursor parses TextCursor.String's form, as a client sends it back.
func ParseTextCursor(s string) (TextCursor, error) {
	bad := func(why string) (TextCursor, error) {
		return TextCursor{}, fmt.Errorf("text cursor %q: %s; want attempt.text.reasoning.entry as sent in the event id", s, why)
	}
	parts := strings.SplitN(s, ".", 4)
	if len(parts) != 4 {
		return bad("not four parts")
	}
	var n [3]int
	for i, f := range parts[:3] {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 || len(f) > 12 {
			return bad(fmt.Sprintf("part %d is not a count", i+1))
		}
		n[i] = v
	}
	c := TextCursor{Attempt: n[0], Text: n[1], Reasoning: n[2], Entry: parts[3]}
	if c.Entry != "" && !validEntryID(c.Entry) {
		return bad("the entry is not a stream entry id (ms-seq)")
	}
	return c, nil
}

func validEntryID(s string) bool {
	ms, seq, ok := strings.Cut(s, "-")
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return ok && err1 == nil && err2 == nil
}
