package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/redlite/batch/engine/ml"
)

// SharedPrefixRun describes the prefix cache's measurement: Jobs prompts of one Document
// of random tokens followed by a Question of random tokens each, submitted together to one
// scheduler (Jobs slots, a pool that holds them all), greedy, MaxTokens each.
type SharedPrefixRun struct {
	Document, Question, Jobs, MaxTokens int
	KV                                  ml.DType
	// CacheBytes bounds the recurrent checkpoints (PrefixCacheOptions.MaxBytes).
	CacheBytes int64
}

// SharedPrefixResult is one run, with the cache on or off.
type SharedPrefixResult struct {
	Cache bool
	// Computed is the prompt tokens the engine prefilled; Cached those it took from the
	// cache instead.
	Computed, Cached int
	Wall             time.Duration
	Tokens           [][]int32 // each job's greedy output
}

// MeasureSharedPrefix runs r twice — the cache off, then on — and returns both runs.
func (m *Model) MeasureSharedPrefix(ctx context.Context, r SharedPrefixRun) ([2]SharedPrefixResult, error) {
	var out [2]SharedPrefixResult
	if r.Document < 1 || r.Question < 1 || r.Jobs < 1 || r.MaxTokens < 1 {
		return out, fmt.Errorf("engine: a shared-prefix run of %d jobs, %d + %d prompt tokens, %d generated", r.Jobs, r.Document, r.Question, r.MaxTokens)
	}
	vocab := m.Config().Vocab
	rng := rand.New(rand.NewPCG(uint64(r.Document), uint64(r.Question)))
	random := func(n int) []int32 {
		t := make([]int32, n)
		for i := range t {
			t[i] = int32(rng.IntN(vocab))
		}
		return t
	}
	doc := random(r.Document)
	prompts := make([][]int32, r.Jobs)
	for i := range prompts {
		prompts[i] = append(slices.Clone(doc), random(r.Question)...)
	}
	capacity := r.Document + r.Question + r.MaxTokens
	for i, cache := range []bool{false, true} {
		o := SchedulerOptions{KV: r.KV, Slots: r.Jobs, Blocks: r.Jobs * ml.BlocksFor(capacity, DefaultBlockSize)}
		if cache {
			o.Prefix = &PrefixCacheOptions{MaxBytes: r.CacheBytes}
		}
		s, err := m.NewScheduler(o)
		if err != nil {
			return out, err
		}
		res := SharedPrefixResult{Cache: cache, Tokens: make([][]int32, r.Jobs)}
		var mu sync.Mutex
		var first error
		var wg sync.WaitGroup
		s.Pause()
		start := time.Now()
		for j, p := range prompts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := s.Generate(ctx, p, capacity, GenerateOptions{MaxTokens: r.MaxTokens, Stream: DiscardText{}})
				mu.Lock()
				defer mu.Unlock()
				if err != nil && first == nil {
					first = err
				}
				res.Tokens[j] = g.Tokens
				res.Computed += g.PromptTokens - g.CachedTokens
				res.Cached += g.CachedTokens
			}()
		}
		for s.Waiting() < len(prompts) {
			time.Sleep(time.Millisecond)
		}
		s.Resume()
		wg.Wait()
		res.Wall = time.Since(start)
		s.Close()
		if first != nil {
			return out, first
		}
		out[i] = res
	}
	return out, nil
}
