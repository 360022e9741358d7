package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/redlite/batch/internal/redisx"
)

// Hierarchy is the state of a hierarchical summary's parent job, kept in the parent's own
// task hash (field treeField), so that it lives and dies with the task: the pieces the
// document was cut into and the child jobs of each level so far. The worker that runs the
// parent first writes it; every later attempt, on any worker, reads it and re-derives the
// same child jobs, so a re-run never duplicates a child.
type Hierarchy struct {
	Pieces []Span `json:"pieces"`
	// PieceTokens is the token limit of a piece; PartialMaxTokens the max_tokens of every
	// intermediate summary; GroupTokens and FinalTokens how many tokens of partial
	// summaries one intermediate, or the final, reduce job may read.
	PieceTokens      int              `json:"piece_tokens"`
	PartialMaxTokens int              `json:"partial_max_tokens"`
	GroupTokens      int              `json:"group_tokens"`
	FinalTokens      int              `json:"final_tokens"`
	Levels           []HierarchyLevel `json:"levels"`
}

// HierarchyLevel is one level's child jobs. For a reduce level, Groups[i] is the range
// [from, to) of the previous level's summaries that child i combines.
type HierarchyLevel struct {
	Children []string `json:"children"`
	Groups   [][2]int `json:"groups,omitempty"`
	Final    bool     `json:"final,omitempty"`
}

// treeField is the parent task hash's field that holds its Hierarchy (asynq leaves fields
// it does not know alone, and deletes them with the task).
const treeField = "redlite_tree"

// LoadHierarchy reads a parent's state; ok is false when it has none yet.
func (c *Client) LoadHierarchy(ctx context.Context, queue, id string) (h Hierarchy, raw string, ok bool, err error) {
	raw, err = c.rdb.HGet(ctx, redisx.TaskKey(queue, id), treeField).Result()
	if errors.Is(err, redis.Nil) {
		return Hierarchy{}, "", false, nil
	}
	if err != nil {
		return Hierarchy{}, "", false, fmt.Errorf("read the summary tree of job %s: %w", id, redisx.Classify(err))
	}
	if err := json.Unmarshal([]byte(raw), &h); err != nil {
		return Hierarchy{}, "", false, fmt.Errorf("read the summary tree of job %s: %w", id, err)
	}
	return h, raw, true, nil
}

var saveTreeScript = redis.NewScript(`
if redis.call("EXISTS", KEYS[1]) == 0 then return -1 end
local cur = redis.call("HGET", KEYS[1], ARGV[1]) or ""
if cur ~= ARGV[2] then return 0 end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[3])
return 1`)

// ErrTreeChanged is returned by SaveHierarchy when another attempt saved first.
var ErrTreeChanged = errors.New("the summary tree changed meanwhile")

// SaveHierarchy stores h as the parent's state if the state is still old (the raw value
// LoadHierarchy returned, "" for none): two attempts of one parent can never build two
// different trees.
func (c *Client) SaveHierarchy(ctx context.Context, queue, id, old string, h Hierarchy) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	n, err := saveTreeScript.Run(ctx, c.rdb, []string{redisx.TaskKey(queue, id)}, treeField, old, b).Int()
	switch {
	case err != nil:
		return fmt.Errorf("save the summary tree of job %s: %w", id, redisx.Classify(err))
	case n < 0:
		return fmt.Errorf("save the summary tree of job %s: %w", id, ErrNotFound)
	case n == 0:
		return fmt.Errorf("save the summary tree of job %s: %w", id, ErrTreeChanged)
	}
	return nil
}

// cancelChildren cancels every child job of a cancelled hierarchical summary, all at once
// (an active child waits for its worker to let go).
func (c *Client) cancelChildren(ctx context.Context, queue, id string) error {
	h, _, ok, err := c.LoadHierarchy(ctx, queue, id)
	if err != nil || !ok {
		return err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, l := range h.Levels {
		for _, child := range l.Children {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := c.Cancel(ctx, child)
				if err != nil && !errors.Is(err, ErrFinished) && !errors.Is(err, ErrNotFound) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// cancelled records a cancelled job's result and cancels its children, if it has any.
func (c *Client) cancelled(ctx context.Context, info *asynq.TaskInfo) error {
	if err := c.markCancelled(ctx, info); err != nil {
		return err
	}
	if info.Type != TypeSummarize {
		return nil
	}
	if err := c.cancelChildren(ctx, info.Queue, info.ID); err != nil {
		return fmt.Errorf("cancel job %s: its child jobs: %w", info.ID, err)
	}
	return nil
}

var inheritOwnerScript = redis.NewScript(`
local owner = redis.call("GET", KEYS[1])
if not owner then return 0 end
local ttl = redis.call("PTTL", KEYS[1])
if ttl > 0 then redis.call("SET", KEYS[2], owner, "PX", ttl) else redis.call("SET", KEYS[2], owner) end
return 1`)

// InheritOwner gives a child job the owner its parent has through redlite-api
// (JobOwnerKey), so that only the parent's token reads the pieces of its document; a parent
// without one (a Go or CLI client's) leaves the child open, as it is.
func (c *Client) InheritOwner(ctx context.Context, parent, child string) error {
	if err := inheritOwnerScript.Run(ctx, c.rdb, []string{JobOwnerKey(parent), JobOwnerKey(child)}).Err(); err != nil {
		return fmt.Errorf("give job %s the owner of %s: %w", child, parent, redisx.Classify(err))
	}
	return nil
}
