package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Per-token storage quotas. Files live in Redis (files.go), so a token that stores without
// limit fills Redis for everyone: each token's stored bytes are counted (keyStoredBytes, with
// each file's size in keyFileBytes so that rewriting or deleting a file corrects the count
// exactly once), and an upload that would pass REDLITE_API_MAX_STORED_BYTES is refused.
// Unfinished batches are counted likewise (keyQueuedBatches).

// queuedBatchesRetry is the Retry-After of a token at its limit of unfinished batches.
const queuedBatchesRetry = time.Minute

// reserveBytesScript books ARGV[2] bytes for file ARGV[1] in the token's count (KEYS[1]
// counter, KEYS[2] sizes), replacing what the file had, unless ARGV[3] > 0 and the count
// would pass it while growing. It returns {1, count} when booked, {0, count} when refused.
var reserveBytesScript = redis.NewScript(`
local old = tonumber(redis.call("HGET", KEYS[2], ARGV[1]) or "0")
local size, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local cur = tonumber(redis.call("GET", KEYS[1]) or "0")
if limit > 0 and size > old and cur - old + size > limit then return {0, cur} end
redis.call("HSET", KEYS[2], ARGV[1], size)
return {1, redis.call("INCRBY", KEYS[1], size - old)}`)

// releaseBytesScript takes file ARGV[1] out of the token's count. Its first write is a
// deletion, so that Redis runs it even at maxmemory: freeing memory must work when full.
var releaseBytesScript = redis.NewScript(`
local old = redis.call("HGET", KEYS[2], ARGV[1])
if not old then return 0 end
redis.call("HDEL", KEYS[2], ARGV[1])
redis.call("DECRBY", KEYS[1], old)
return 1`)

// reserveBytes books size bytes for file id of token who; limit 0 books without a limit.
func (s *Server) reserveBytes(ctx context.Context, who, id string, size, limit int64) error {
	res, err := reserveBytesScript.Run(ctx, s.rdb, []string{keyStoredBytes(who), keyFileBytes(who)}, id, size, limit).Int64Slice()
	if err != nil {
		return serverError(fmt.Errorf("count the token's stored bytes: %w", err))
	}
	if res[0] == 0 {
		s.m.limited.WithLabelValues("stored_bytes").Inc()
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalid, code: "storage_quota_exceeded", param: "file",
			msg: fmt.Sprintf("this token stores %d bytes of files; %d more would pass its limit of %d (REDLITE_API_MAX_STORED_BYTES): delete files it no longer needs (DELETE /v1/files/{id})",
				res[1], size, limit)}
	}
	return nil
}

// releaseBytes takes file id out of the count of token who.
func (s *Server) releaseBytes(ctx context.Context, who, id string) error {
	if err := releaseBytesScript.Run(ctx, s.rdb, []string{keyStoredBytes(who), keyFileBytes(who)}, id).Err(); err != nil {
		return serverError(fmt.Errorf("count the token's stored bytes: %w", err))
	}
	return nil
}

// reserveBatchScript adds batch ARGV[1] to the token's unfinished batches (KEYS[1]) unless
// ARGV[2] > 0 of them are there already: 1 when added, 0 when refused.
var reserveBatchScript = redis.NewScript(`
local limit = tonumber(ARGV[2])
if limit > 0 and redis.call("SCARD", KEYS[1]) >= limit then return 0 end
redis.call("SADD", KEYS[1], ARGV[1])
return 1`)

// reserveBatch books a place for batch id among the unfinished batches of token who.
func (s *Server) reserveBatch(ctx context.Context, who, id string) error {
	max := s.cfg.MaxQueuedBatches
	ok, err := reserveBatchScript.Run(ctx, s.rdb, []string{keyQueuedBatches(who)}, id, max).Int()
	if err != nil {
		return serverError(fmt.Errorf("count the token's batches: %w", err))
	}
	if ok == 0 {
		s.m.limited.WithLabelValues("queued_batches").Inc()
		return &apiError{status: http.StatusTooManyRequests, typ: typeRate, code: "too_many_queued_batches", retryAfter: queuedBatchesRetry,
			msg: fmt.Sprintf("this token has %d unfinished batches, its limit (REDLITE_API_MAX_QUEUED_BATCHES); wait for one to finish, or cancel one", max)}
	}
	return nil
}

// tx runs fn's commands in one MULTI/EXEC. When Redis refuses a queued command (at
// maxmemory it refuses every command queued in a MULTI) it discards the transaction with a
// bare EXECABORT that names no reason; go-redis keeps each command's own refusal, and tx
// returns that, so that an out-of-memory Redis is reported as such (503 redis_unavailable).
func (s *Server) tx(ctx context.Context, fn func(redis.Pipeliner) error) error {
	cmds, err := s.rdb.TxPipelined(ctx, fn)
	if err == nil || !strings.HasPrefix(err.Error(), "EXECABORT") {
		return err
	}
	for _, c := range cmds {
		if cerr := c.Err(); cerr != nil && !strings.HasPrefix(cerr.Error(), "EXECABORT") {
			return fmt.Errorf("%w (%s: %v)", cerr, c.Name(), err)
		}
	}
	return err
}
