package redisx

import (
	"errors"
	"strings"
)

// Sentinel errors for a Redis that answers but refuses; test with errors.Is.
var (
	// ErrAuth: Redis refused the URL's credentials (a wrong password or user, or a
	// password where Redis has none).
	ErrAuth = errors.New("redis authentication failed")
	// ErrOOM: Redis is at its maxmemory with the noeviction policy and refuses writes.
	ErrOOM = errors.New("redis is out of memory")
)

// redisRefusal is an error of Redis that a retry will not cure, with what to do about it.
type redisRefusal struct {
	kind error
	hint string
	err  error
}

func (e *redisRefusal) Error() string {
	return e.kind.Error() + " (" + e.hint + "): " + e.err.Error()
}

func (e *redisRefusal) Unwrap() error { return e.err }

func (e *redisRefusal) Is(target error) bool { return target == e.kind }

// authReplies are the starts of Redis's error replies to bad credentials: WRONGPASS (Redis
// 6+), NOAUTH (no AUTH sent to a Redis that needs one), "invalid password" (Redis < 6), and
// AUTH to a Redis without a password.
var authReplies = []string{"WRONGPASS", "NOAUTH", "invalid password", "AUTH <password> called without any password configured", "invalid username-password pair"}

// Classify turns Redis's refusals (bad credentials, out of memory) into errors that
// match ErrAuth or ErrOOM and say what to do; other errors pass unchanged. asynq
// flattens go-redis errors into strings, so the reply text is what is matched. Redis never
// repeats the password in these replies.
func Classify(err error) error {
	if err == nil || errors.Is(err, ErrAuth) || errors.Is(err, ErrOOM) {
		return err
	}
	msg := err.Error()
	for _, r := range authReplies {
		if strings.Contains(msg, r) {
			return &redisRefusal{kind: ErrAuth, hint: "check the user and password of the Redis URL", err: err}
		}
	}
	if strings.Contains(msg, "OOM command not allowed") {
		return OutOfMemory(err)
	}
	return err
}

// OutOfMemory is err (what showed that Redis is full) as an error matching ErrOOM, with
// what to do about it.
func OutOfMemory(err error) error {
	return &redisRefusal{kind: ErrOOM, hint: "it is at its maxmemory with the noeviction policy and refuses new jobs until memory is freed: wait for finished results to expire, delete archived jobs, or raise maxmemory", err: err}
}
