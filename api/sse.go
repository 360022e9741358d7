package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// sseKeepalive is how often a stream with nothing to say sends a comment, so that proxies
// and load balancers (commonly 60 s idle timeouts) keep a long wait open.
const sseKeepalive = 15 * time.Second

// sseStream writes Server-Sent Events; a keepalive goroutine writes comments between them,
// hence the lock.
type sseStream struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	fl   http.Flusher
	stop chan struct{}
	done chan struct{}
}

// startSSE sends the stream's headers and starts its keepalive; close stops it.
func startSSE(w http.ResponseWriter) (*sseStream, error) {
	fl, ok := w.(http.Flusher)
	if !ok {
		return nil, serverError(errors.New("the response cannot stream"))
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx would otherwise hold the events back
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	s := &sseStream{w: w, fl: fl, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(sseKeepalive)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				s.comment("keepalive")
			}
		}
	}()
	return s, nil
}

func (s *sseStream) close() {
	close(s.stop)
	<-s.done
}

// event writes one event; an empty name writes a bare data line, as OpenAI's streams do.
// v is JSON-encoded unless it is a string.
func (s *sseStream) event(name string, v any) { s.eventID(name, "", v) }

// eventID is event with an id, which a client that reconnects sends back as Last-Event-ID.
func (s *sseStream) eventID(name, id string, v any) {
	data, ok := v.(string)
	if !ok {
		b, _ := json.Marshal(v)
		data = string(b)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	if id != "" {
		fmt.Fprintf(s.w, "id: %s\n", id)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", data)
	s.fl.Flush()
}

// comment writes an SSE comment, which clients ignore.
func (s *sseStream) comment(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, ": %s\n\n", text)
	s.fl.Flush()
}
