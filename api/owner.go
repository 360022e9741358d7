package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/jobs"
)

// Ownership. Every job the API enqueues (POST /v1/jobs, chat completions, batch lines; a
// hierarchical summary's children inherit it in the worker) has its owner, the token's short
// digest, recorded under keyOwner before the job exists, so that no moment shows a job
// without one. A job is visible to its owner alone: to any other token, and for jobs with no
// owner (enqueued by the CLI or the Go client, straight into Redis), every route answers 404
// exactly as for an id that does not exist, so that a guessed id tells nothing.
//
// Ids are per token too: an idempotency key becomes the job id inside the token's own
// namespace (scopedKey), and jobs without one get a random id, so that no token can name,
// take or collide with an id of another's, nor with a batch line's or a child job's.

// ownerTTL keeps a job's owner at least as long as the job can exist: the longest timeout
// plus the result's retention.
const ownerTTL = jobs.MaxTimeoutSeconds*time.Second + jobs.DefaultRetention

// scopedKey is the job id of idempotency key key from token who: "<who>.<key>", or, when
// that exceeds the length of a job id, "<who>.h-" and 32 hex digits of the key's SHA-256.
func scopedKey(who, key string) string {
	id := who + "." + key
	if len(id) > jobs.MaxIdempotencyKeyLen {
		sum := sha256.Sum256([]byte(key))
		id = who + ".h-" + hex.EncodeToString(sum[:16])
	}
	return id
}

// newJobID is a random UUID (version 4), the form asynq gives the jobs it names itself.
func newJobID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// claimOwnerScript records ARGV[1] as the owner of a job id (KEYS[1]) for ARGV[2] ms unless
// another owner holds it: 1 when it recorded a new owner, 2 when the owner already was
// ARGV[1] (its life is renewed), 0 when it is another's.
var claimOwnerScript = redis.NewScript(`
local cur = redis.call("GET", KEYS[1])
if not cur then redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2]) return 1 end
if cur == ARGV[1] then redis.call("PEXPIRE", KEYS[1], ARGV[2]) return 2 end
return 0`)

// claimOwner records who as the owner of the job id before the job is enqueued; created
// reports a new record, which the caller drops again if the enqueue fails.
func (s *Server) claimOwner(ctx context.Context, who, id string) (created bool, err error) {
	n, err := claimOwnerScript.Run(ctx, s.rdb, []string{keyOwner(id)}, who, ownerTTL.Milliseconds()).Int()
	if err != nil {
		return false, serverError(fmt.Errorf("record the owner of job %s: %w", id, err))
	}
	if n == 0 {
		// Only a job enqueued outside the API with an id in this token's namespace gets here.
		return false, conflict("idempotency_key_in_use", "job id %s is taken by a job this token did not submit; use another idempotency key", id)
	}
	return n == 1, nil
}

// dropOwner undoes a claimOwner whose enqueue failed, unless a job holds the id after all
// (a concurrent request of the same token enqueued it).
func (s *Server) dropOwner(ctx context.Context, id string) {
	ctx = context.WithoutCancel(ctx)
	if _, err := s.client.Status(ctx, id); !errors.Is(err, jobs.ErrNotFound) {
		return
	}
	if err := s.rdb.Del(ctx, keyOwner(id)).Err(); err != nil {
		s.log.Warn("drop the owner of a job not enqueued", "job", id, "err", err)
	}
}

// checkOwner answers 404 unless who owns job id: another token's job and a job without an
// owner are answered exactly as an id that does not exist.
func (s *Server) checkOwner(ctx context.Context, who, id string) error {
	owner, err := s.rdb.Get(ctx, keyOwner(id)).Result()
	if errors.Is(err, redis.Nil) || (err == nil && owner != who) {
		return notFound("job", id)
	}
	if err != nil {
		return serverError(fmt.Errorf("look up the owner of job %s: %w", id, err))
	}
	return nil
}

// owners reads the owners of ids in one round trip; an id without one maps to "".
func (s *Server) owners(ctx context.Context, ids []string) (map[string]string, error) {
	out := make(map[string]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = keyOwner(id)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, serverError(fmt.Errorf("look up job owners: %w", err))
	}
	for i, v := range vals {
		o, _ := v.(string)
		out[ids[i]] = o
	}
	return out, nil
}

// redactWorkers hides what other tenants run: a job who does not own keeps its type,
// queue, times and progress (the fleet's load is no secret) but loses its id, which is all
// that would let a token address it.
func (s *Server) redactWorkers(ctx context.Context, who string, ws []jobs.WorkerServer) ([]jobs.WorkerServer, error) {
	var ids []string
	for _, w := range ws {
		for _, a := range w.Active {
			ids = append(ids, a.ID)
		}
	}
	owner, err := s.owners(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]jobs.WorkerServer, len(ws))
	for i, w := range ws {
		active := make([]jobs.ActiveJob, len(w.Active))
		for j, a := range w.Active {
			if owner[a.ID] != who {
				a.ID = ""
			}
			active[j] = a
		}
		w.Active = active
		out[i] = w
	}
	return out, nil
}

// statusNotFound maps a job that is gone (its owner record outlives it) to the same 404 as
// one that never was.
func statusNotFound(id string, err error) error {
	if errors.Is(err, jobs.ErrNotFound) {
		return notFound("job", id)
	}
	return err
}
