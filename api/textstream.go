package api

import (
	"context"

	"github.com/redlite/batch/jobs"
)

// maxStreamReaders bounds the connections of the server's blocking reads of text streams:
// one per stream waiting for its job's next piece. A stream beyond them waits for a
// connection (go-redis's pool timeout, 4 s) and then fails.
const maxStreamReaders = 1024

// followText waits for job id and hands its text to o's callbacks as the workers generate
// it (jobs.Client.FollowText: a blocking read of the job's text stream, the status looked
// at every REDLITE_API_STREAM_POLL_INTERVAL), for every route that streams a job's text.
func (s *Server) followText(ctx context.Context, id string, o jobs.FollowOptions) (jobs.Result, error) {
	if o.Check <= 0 {
		o.Check = s.cfg.StreamPollInterval
	}
	return s.client.FollowText(ctx, id, o)
}

// delta is new text of a job: the SSE "delta" event.
type delta struct {
	Text      string `json:"text,omitempty"`
	Reasoning string `json:"reasoning,omitempty"`
	// Gap says text before this piece was missed (the reader fell more than
	// jobs.TextStreamMaxLen entries behind, or resumed after the stream expired); the
	// result has it all.
	Gap bool `json:"gap,omitempty"`
}

func (d delta) empty() bool { return d.Text == "" && d.Reasoning == "" }

// reset is the SSE "reset" event: the text sent so far is void, the job's attempt (from 1)
// sends its own from the start. The job ran again after its worker died and the new attempt
// does not repeat the old one's text.
type reset struct {
	Attempt int `json:"attempt"`
}
