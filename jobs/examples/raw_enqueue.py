#!/usr/bin/env python3
"""Enqueue a Red Lite Batch job with raw Redis commands, without asynq or any library.

This is the reference for clients in languages without an asynq client: it writes exactly
what asynq v0.26's Client.Enqueue writes (see jobs/README.md, "Enqueueing with raw Redis
commands"). Standard library only; speaks RESP over a plain socket (no TLS, no AUTH: add
them for a real deployment).

    python3 raw_enqueue.py --addr 127.0.0.1:6379 --type summarize < payload.json

prints the job id. The payload must be a valid version-1 payload (jobs/schema/).
"""
import argparse
import json
import socket
import sys
import time
import uuid


# --- protobuf: asynq's TaskMessage (internal/proto/asynq.proto), hand-encoded ---------

def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1  # negative int64 values are ten-byte two's complement varints
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_bytes(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


def field_int(num, value):
    return varint(num << 3 | 0) + varint(value) if value else b""  # proto3 omits zeros


def task_message(task_type, payload, task_id, queue, retry, timeout, deadline, retention):
    return (field_bytes(1, task_type.encode())    # type
            + field_bytes(2, payload)             # payload (our JSON)
            + field_bytes(3, task_id.encode())    # id
            + field_bytes(4, queue.encode())      # queue
            + field_int(5, retry)                 # retry: max retries
            + field_int(8, timeout)               # timeout, seconds
            + field_int(9, deadline)              # deadline, Unix seconds
            + field_int(12, retention))           # retention, seconds


# --- RESP ----------------------------------------------------------------------------

def command(sock, reader, *args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    sock.sendall(b"".join(parts))
    line = reader.readline()
    if line.startswith(b"-"):
        raise RuntimeError("redis: " + line[1:].strip().decode())
    if line.startswith(b":"):
        return int(line[1:])
    if line.startswith(b"+"):
        return line[1:].strip().decode()
    raise RuntimeError("unexpected reply %r" % line)


# Mirrors asynq's enqueueCmd: refuse an existing id, store the task, push it on the queue.
ENQUEUE = b"""
if redis.call("EXISTS", KEYS[1]) == 1 then
  return 0
end
redis.call("HSET", KEYS[1], "msg", ARGV[1], "state", "pending", "pending_since", ARGV[3])
redis.call("LPUSH", KEYS[2], ARGV[2])
return 1
"""

QUEUES = {"high": "critical", "normal": "default", "low": "low"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addr", default="127.0.0.1:6379")
    ap.add_argument("--db", type=int, default=0)
    ap.add_argument("--type", required=True, choices=["summarize", "generate"])
    ap.add_argument("--retry", type=int, default=3)
    ap.add_argument("--retention", type=int, default=86400, help="seconds the result is kept (must be > 0)")
    args = ap.parse_args()

    payload = sys.stdin.buffer.read()
    doc = json.loads(payload)
    queue = QUEUES[doc.get("priority") or "normal"]
    task_id = doc.get("idempotency_key") or str(uuid.uuid4())
    timeout = doc.get("timeout") or 0
    deadline = 0
    if doc.get("deadline"):
        from datetime import datetime
        deadline = int(datetime.fromisoformat(doc["deadline"].replace("Z", "+00:00")).timestamp())
    if not timeout and not deadline:
        timeout = 3600  # the Go client's default; asynq needs one of the two
    msg = task_message(args.type, payload, task_id, queue, args.retry, timeout, deadline, args.retention)

    host, port = args.addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        reader = sock.makefile("rb")
        if args.db:
            command(sock, reader, "SELECT", args.db)
        command(sock, reader, "SADD", "asynq:queues", queue)
        prefix = "asynq:{%s}:" % queue
        ok = command(sock, reader, "EVAL", ENQUEUE, 2, prefix + "t:" + task_id, prefix + "pending",
                     msg, task_id, time.time_ns())
    if ok == 0:
        print("duplicate: job %s already exists in queue %s" % (task_id, queue), file=sys.stderr)
        sys.exit(3)
    print(task_id)


if __name__ == "__main__":
    main()
