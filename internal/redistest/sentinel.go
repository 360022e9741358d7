package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// ReplicaOf makes the server a replica of primary.
func ReplicaOf(primary *Server) Option {
	return WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
}

// SentinelTiming is how quickly sentinels act: a primary that does not answer for Down is
// considered down, and a failover that takes longer than Failover is tried again. Redis's
// defaults (30 s and 3 min) are for production; tests want seconds.
type SentinelTiming struct {
	DownAfterMS, FailoverTimeoutMS int
}

// StartSentinels starts n Redis Sentinels watching primary under the name master, with the
// given quorum, and returns them. Each stops in t.Cleanup.
func StartSentinels(t testing.TB, n int, master string, primary *Server, quorum int, timing SentinelTiming) []*Server {
	t.Helper()
	conf := strings.Join([]string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", master, primary.Port(), quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", master, timing.DownAfterMS),
		fmt.Sprintf("sentinel failover-timeout %s %d", master, timing.FailoverTimeoutMS),
		fmt.Sprintf("sentinel parallel-syncs %s 1", master),
	}, "\n") + "\n"
	if primary.pass != "" {
		conf += fmt.Sprintf("sentinel auth-pass %s %s\n", master, primary.pass)
	}
	out := make([]*Server, n)
	for i := range out {
		out[i] = Start(t, func(s *Server) { s.sentinelConf = conf })
	}
	return out
}

// SentinelURL is the redis-sentinel:// URL of these sentinels' primary, database db.
func SentinelURL(sentinels []*Server, master string, db int) string {
	addrs := make([]string, len(sentinels))
	for i, s := range sentinels {
		addrs[i] = s.Addr()
	}
	return fmt.Sprintf("redis-sentinel://%s/%s/%d", strings.Join(addrs, ","), master, db)
}
