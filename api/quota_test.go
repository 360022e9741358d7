package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/redlite/batch/api"
	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/jobs"
)

// batchLines is a batch input file of n chat lines, padded to about size bytes.
func batchLines(t *testing.T, n, size int) []byte {
	t.Helper()
	pad := strings.Repeat("x", max(0, size/n-150))
	return jsonl(t, n, func(i int) map[string]any { return chatBody("", 2, "Say hi."+pad) })
}

// TestStorageQuota: a token's stored bytes are bounded by REDLITE_API_MAX_STORED_BYTES (413
// storage_quota_exceeded, per token, given back by a delete), and its unfinished batches by
// REDLITE_API_MAX_QUEUED_BATCHES (429 too_many_queued_batches, given back when one ends).
func TestStorageQuota(t *testing.T) {
	const quota = 8192
	b := setup(t, setupOpts{config: func(c *api.Config) {
		c.MaxStoredBytes, c.MaxFileBytes, c.MaxQueuedBatches = quota, 8192, 1
	}})

	t.Run("StoredBytes", func(t *testing.T) {
		big := batchLines(t, 2, 5000)
		code, data := b.upload(t, tokenA, big)
		if code != http.StatusOK {
			t.Fatalf("first upload: %d %s", code, data)
		}
		first := idOf(t, data)
		code, data = b.upload(t, tokenA, big)
		wantError(t, "over the quota", code, data, http.StatusRequestEntityTooLarge, "storage_quota_exceeded", "REDLITE_API_MAX_STORED_BYTES")
		if ids := b.listIDs(t, tokenA, "/v1/files"); len(ids) != 1 {
			t.Errorf("files after a refused upload: %v, want the first alone", ids)
		}
		// The quota is the token's own.
		if code, data := b.upload(t, tokenB, big); code != http.StatusOK {
			t.Errorf("another token's upload: %d %s", code, data)
		}
		// A delete gives the bytes back.
		if code, data := b.call(t, tokenA, "DELETE", "/v1/files/"+first, nil); code != http.StatusOK {
			t.Fatalf("delete: %d %s", code, data)
		}
		if code, data := b.upload(t, tokenA, big); code != http.StatusOK {
			t.Errorf("upload after a delete: %d %s", code, data)
		}
	})

	t.Run("QueuedBatches", func(t *testing.T) {
		// A line that decodes until cancelled keeps the first batch in progress.
		long := chatBody(b.modelName(), jobs.MaxMaxTokens, "Tell a very long story.")
		code, data := b.upload(t, tokenB, jsonl(t, 1, func(int) map[string]any { return long }))
		if code != http.StatusOK {
			t.Fatalf("upload: %d %s", code, data)
		}
		file := idOf(t, data)
		req := map[string]any{"input_file_id": file, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
		code, data = b.call(t, tokenB, "POST", "/v1/batches", req)
		if code != http.StatusOK {
			t.Fatalf("first batch: %d %s", code, data)
		}
		first := idOf(t, data)
		code, data = b.call(t, tokenB, "POST", "/v1/batches", req)
		wantError(t, "second batch", code, data, http.StatusTooManyRequests, "too_many_queued_batches", "REDLITE_API_MAX_QUEUED_BATCHES")
		// Another token has its own count.
		code, data = b.upload(t, tokenA, jsonl(t, 1, func(int) map[string]any { return chatBody(b.modelName(), 2, "Hi.") }))
		if code != http.StatusOK {
			t.Fatalf("A's upload: %d %s", code, data)
		}
		if code, data := b.call(t, tokenA, "POST", "/v1/batches", map[string]any{"input_file_id": idOf(t, data), "endpoint": "/v1/chat/completions", "completion_window": "24h"}); code != http.StatusOK {
			t.Errorf("A's batch beside B's: %d %s", code, data)
		}
		if code, data := b.call(t, tokenB, "POST", "/v1/batches/"+first+"/cancel", nil); code != http.StatusOK {
			t.Fatalf("cancel: %d %s", code, data)
		}
		waitFor(t, "the first batch cancelled", func() bool {
			code, data := b.call(t, tokenB, "GET", "/v1/batches/"+first, nil)
			var bt api.Batch
			return code == http.StatusOK && json.Unmarshal(data, &bt) == nil && bt.Status == "cancelled"
		})
		code, data = b.call(t, tokenB, "POST", "/v1/batches", req)
		if code != http.StatusOK {
			t.Fatalf("a batch once the first ended: %d %s", code, data)
		}
		b.call(t, tokenB, "POST", "/v1/batches/"+idOf(t, data)+"/cancel", nil) // its line would decode for long
	})
}

// TestRedisFull: one token fills Redis up to its maxmemory (noeviction) with uploads, as in
// issue 25. Every write of every token is then refused with 503 redis_unavailable (never a
// 500), /readyz fails, reads still answer, and deleting files (which frees memory) works;
// once memory is back, so is everything.
func TestRedisFull(t *testing.T) {
	const maxmemory = 6 << 20
	r := redistest.Start(t, redistest.WithArgs("--maxmemory", fmt.Sprint(maxmemory), "--maxmemory-policy", "noeviction"))
	b := setup(t, setupOpts{noDaemon: true, redis: r, config: func(c *api.Config) {
		c.MaxStoredBytes, c.MaxFileBytes, c.RateLimit = 0, 1<<20, 1000
	}})
	ready := func() (int, string) {
		code, data := b.call(t, "", "GET", "/readyz", nil)
		return code, string(data)
	}
	if code, body := ready(); code != http.StatusOK {
		t.Fatalf("readyz before: %d %s", code, body)
	}
	file := bytes.Repeat([]byte(`{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}`+"\n"), (256<<10)/90)
	var stored []string
	var code int
	var data []byte
	for range 4 * maxmemory / len(file) {
		if code, data = b.upload(t, tokenA, file); code != http.StatusOK {
			break
		}
		stored = append(stored, idOf(t, data))
	}
	wantError(t, "an upload into a full Redis", code, data, http.StatusServiceUnavailable, "redis_unavailable", "out of memory")
	if len(stored) == 0 {
		t.Fatal("no upload fitted")
	}
	// Redis refuses a write when what it holds plus the request's own buffers passes
	// maxmemory, so the refused upload may have left it just under. Pin the limit below what
	// is used now, as an operator lowering it would, so that Redis stays full until memory
	// is freed.
	used := usedMemory(t, b)
	if err := b.rdb.ConfigSet(context.Background(), "maxmemory", fmt.Sprint(used-len(file))).Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d uploads of %d bytes filled a Redis of maxmemory %d (used_memory %d)", len(stored), len(file), maxmemory, used)

	t.Run("WritesRefused", func(t *testing.T) {
		for _, w := range []struct {
			name, method, path string
			body               any
		}{
			{"job", "POST", "/v1/jobs", generate(2)},
			{"chat", "POST", "/v1/chat/completions", chatBody("", 2, "Hi.")},
			{"batch", "POST", "/v1/batches", map[string]any{"input_file_id": stored[0], "endpoint": "/v1/chat/completions", "completion_window": "24h"}},
		} {
			code, data := b.call(t, tokenA, w.method, w.path, w.body)
			wantError(t, w.name, code, data, http.StatusServiceUnavailable, "redis_unavailable", "out of memory")
		}
		code, data := b.upload(t, tokenB, []byte("{}\n"))
		wantError(t, "another token's upload", code, data, http.StatusServiceUnavailable, "redis_unavailable", "out of memory")
	})

	t.Run("NotReady", func(t *testing.T) {
		if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "out of memory") {
			t.Errorf("readyz while Redis is full: %d %s", code, body)
		}
	})

	t.Run("ReadsAnswer", func(t *testing.T) {
		if code, data := b.call(t, tokenA, "GET", "/v1/files/"+stored[0], nil); code != http.StatusOK {
			t.Errorf("read a file: %d %s", code, data)
		}
		if ids := b.listIDs(t, tokenB, "/v1/files"); len(ids) != 0 {
			t.Errorf("B's files: %v", ids)
		}
	})

	t.Run("DeletesFreeMemory", func(t *testing.T) {
		for _, id := range stored {
			if code, data := b.call(t, tokenA, "DELETE", "/v1/files/"+id, nil); code != http.StatusOK {
				t.Fatalf("delete %s in a full Redis: %d %s", id, code, data)
			}
		}
		if code, body := ready(); code != http.StatusOK {
			t.Errorf("readyz once memory is free: %d %s", code, body)
		}
		if code, data := b.upload(t, tokenA, file); code != http.StatusOK {
			t.Errorf("upload once memory is free: %d %s", code, data)
		}
	})
}

// usedMemory is Redis's used_memory.
func usedMemory(t *testing.T, b *bundle) int {
	t.Helper()
	info, err := b.rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var used int
	if i := strings.Index(info, "used_memory:"); i >= 0 {
		fmt.Sscanf(info[i:], "used_memory:%d", &used)
	}
	if used == 0 {
		t.Fatalf("no used_memory in INFO memory:\n%s", info)
	}
	return used
}
