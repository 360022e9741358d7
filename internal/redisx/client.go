package redisx

import (
	"errors"

	"github.com/hibiken/asynq"
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

// NewStreamClient builds a client for blocking reads (XREAD BLOCK) with a pool of up to
// size connections, apart from the process's client: each blocked reader holds a
// connection for its whole wait, and would otherwise take the pool that everything else
// shares. Connections are made as readers need them.
func NewStreamClient(u URL, size int) (redis.UniversalClient, error) {
	opt := u.AsynqOpt()
	switch o := opt.(type) {
	case asynq.RedisClientOpt:
		o.PoolSize = size
		opt = o
	case asynq.RedisFailoverClientOpt:
		o.PoolSize = size
		opt = o
	}
	rdb, ok := opt.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return nil, errors.New("redisx: asynq made a Redis client of an unexpected type")
	}
	return rdb, nil
}
