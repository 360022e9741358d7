package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redlite/batch/internal/redistest"
)

// TestRedisRefusals: a Redis that refuses the credentials, or is full, gives errors that
// say so (and match ErrRedisAuth, ErrRedisOOM) rather than Redis's raw reply alone.
func TestRedisRefusals(t *testing.T) {
	t.Parallel()
	t.Run("WrongPassword", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, redistest.WithPassword("right-pass"))
		for name, url := range map[string]string{
			"wrong":   "redis://:wrong-pass-9@" + srv.Addr() + "/0",
			"missing": "redis://" + srv.Addr() + "/0",
		} {
			c, err := NewClient(url)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = c.Ping(context.Background())
			if !errors.Is(err, ErrRedisAuth) || !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "wrong-pass-9") {
				t.Errorf("%s password: Ping error %v; want ErrRedisAuth without the password", name, err)
			}
			_, err = c.Enqueue(context.Background(), &Generate{Prompt: "x"})
			if !errors.Is(err, ErrRedisAuth) {
				t.Errorf("%s password: Enqueue error %v; want ErrRedisAuth", name, err)
			}
		}
	})
	t.Run("OutOfMemory", func(t *testing.T) {
		t.Parallel()
		// 1 byte of maxmemory: every write is refused, as at a full noeviction Redis.
		srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "1", "--maxmemory-policy", "noeviction"))
		c, err := NewClient(srv.URL(0))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.Enqueue(context.Background(), &Generate{Prompt: "x"})
		if !errors.Is(err, ErrRedisOOM) || !strings.Contains(err.Error(), "redis is out of memory (") {
			t.Errorf("Enqueue into a full Redis: %v; want ErrRedisOOM with an explanation", err)
		}
	})
}
