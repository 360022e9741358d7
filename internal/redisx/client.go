package redisx

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// NewClient builds the go-redis client for u: one server, or the primary the sentinels name
// (go-redis follows a failover). It is built the way asynq builds its own, so a process
// makes one and hands it to asynq (asynq.NewServerFromRedisClient and friends) and to its
// own Redis work. It connects lazily.
func NewClient(u URL) (redis.UniversalClient, error) {
	rdb, ok := u.AsynqOpt().MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return nil, errors.New("redisx: asynq made a Redis client of an unexpected type")
	}
	return rdb, nil
}
