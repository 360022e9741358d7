package api

import (
	"strconv"

	"github.com/redlite/batch/jobs"
)

// The API's own Redis keys, beside asynq's. Each names its type and lifetime; jobs/README
// lists them for operators. "who" is the first 16 hex digits of the SHA-256 of a bearer
// token: enough to tell tokens apart, useless to recover one.
const keyPrefix = "redlite:api:"

// keyRate (string, counter, expires after 2 s): the token's requests in one second.
func keyRate(who string, sec int64) string {
	return keyPrefix + "rate:" + who + ":" + strconv.FormatInt(sec, 10)
}

// keyOwner (string, expires with the job's result): which token submitted a job.
func keyOwner(jobID string) string { return jobs.JobOwnerKey(jobID) }

// keyIdemBody (string, expires with the job's owner): the SHA-256 of the payload first
// submitted with an idempotency key, by the key's job id.
func keyIdemBody(jobID string) string { return keyPrefix + "idem:" + jobID }

// keyModelsCreated (hash model → Unix time): when a worker of each model was first seen,
// the created of GET /v1/models. It has a field per model ever served, so no expiry.
const keyModelsCreated = keyPrefix + "models:created"

// keyOpen (set of job ids): the token's submitted jobs not yet seen finished.
func keyOpen(who string) string { return keyPrefix + "token:" + who + ":open" }

// keyStoredBytes (string, counter) and keyFileBytes (hash file id → bytes): the bytes of the
// token's stored files, for REDLITE_API_MAX_STORED_BYTES; only the scripts of quota.go change
// them, together.
func keyStoredBytes(who string) string { return keyPrefix + "token:" + who + ":stored_bytes" }
func keyFileBytes(who string) string   { return keyPrefix + "token:" + who + ":file_bytes" }

// keyQueuedBatches (set of batch ids): the token's batches not in a final status, for
// REDLITE_API_MAX_QUEUED_BATCHES.
func keyQueuedBatches(who string) string { return keyPrefix + "token:" + who + ":queued_batches" }

// keyFile (string, JSON fileMeta) and keyFileContent (string, the bytes): one file.
func keyFile(id string) string        { return keyPrefix + "file:" + id }
func keyFileContent(id string) string { return keyPrefix + "file:" + id + ":content" }

// keyFiles (sorted set of file ids by creation time, Unix µs): the token's files.
func keyFiles(who string) string { return keyPrefix + "files:" + who }

// keyBatch (string, JSON batchState): one batch.
func keyBatch(id string) string { return keyPrefix + "batch:" + id }

// keyBatches (sorted set of batch ids by creation time, Unix µs): the token's batches.
func keyBatches(who string) string { return keyPrefix + "batches:" + who }

// keyBatchesOpen (set of batch ids): batches not in a final status, which every instance's
// runner looks at.
const keyBatchesOpen = keyPrefix + "batches:open"

// keyBatchLock (string, expires): the instance driving a batch right now.
func keyBatchLock(id string) string { return keyPrefix + "batch:" + id + ":lock" }

// keyBatchReqs (hash line → JSON batchReq): what each input line needs for its output.
func keyBatchReqs(id string) string { return keyPrefix + "batch:" + id + ":reqs" }

// keyBatchPending (set of lines): lines whose job has not finished.
func keyBatchPending(id string) string { return keyPrefix + "batch:" + id + ":pending" }

// keyBatchOut and keyBatchErr (hash line → output line): finished lines, kept as they
// finish, so that a job's result expiring from asynq loses nothing.
func keyBatchOut(id string) string { return keyPrefix + "batch:" + id + ":out" }
func keyBatchErr(id string) string { return keyPrefix + "batch:" + id + ":err" }

// keyBatchUsage (hash "input", "output", "cached" → tokens): the usage summed over completed lines.
func keyBatchUsage(id string) string { return keyPrefix + "batch:" + id + ":usage" }

// keyBatchCancel (string, Unix time): a cancel asked for and not yet taken up by a runner.
func keyBatchCancel(id string) string { return keyPrefix + "batch:" + id + ":cancel" }

// keyBatchPayloads (hash line → generate payload JSON): lines not yet enqueued.
func keyBatchPayloads(id string) string { return keyPrefix + "batch:" + id + ":payloads" }

// keyBatchCancelled (hash line → error line): lines cancelled or expired before they ran.
func keyBatchCancelled(id string) string { return keyPrefix + "batch:" + id + ":cancelled" }
