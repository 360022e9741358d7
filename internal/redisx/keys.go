package redisx

// asynq's key layout (v0.26), for the few places that read or move its data directly: the
// orphan sweep, moving a pending job between queues, finding a job's queue. asynq keeps a
// queue's keys in one Redis Cluster hash slot by the braces around the queue name.

// AllQueues is the set of every queue's name.
const AllQueues = "asynq:queues"

// QueuePrefix starts each key of queue q.
func QueuePrefix(q string) string { return "asynq:{" + q + "}:" }

// TaskKey is the hash holding task id of queue q (fields msg, state, …).
func TaskKey(q, id string) string { return QueuePrefix(q) + "t:" + id }

// PendingKey is the list of queue q's pending task ids.
func PendingKey(q string) string { return QueuePrefix(q) + "pending" }

// LeaseKey is the sorted set of queue q's active task ids by lease expiry.
func LeaseKey(q string) string { return QueuePrefix(q) + "lease" }

// TaskKeyLua is TaskKey as a Lua expression over the Lua expressions q and id, for scripts
// that compute a key inside Redis.
func TaskKeyLua(q, id string) string { return `"asynq:{" .. ` + q + ` .. "}:t:" .. ` + id }
