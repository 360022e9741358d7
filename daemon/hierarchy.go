package daemon

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/planner"
)

// A summary of a document that no plan of this worker holds is made hierarchically (issue
// 14). The parent job cuts the document into pieces that fit (jobs.Split, with this model's
// tokenizer), enqueues one child job per piece (the map, level 0) and returns: it does not
// hold an engine slot while its children run anywhere in the fleet. Its handler returns
// errWaiting, which asynq counts as no failure and retries after REDLITE_HIERARCHY_POLL;
// each such check looks at the current level's children. When they are all done, the
// parent groups their partial summaries into reduce jobs of as many as fit, level after
// level, until one final job, which reads the payload's instructions, remains; its text
// is the parent's result.
//
// The tree lives in the parent's task hash (jobs.Hierarchy), written with a compare-and-set,
// and child ids derive from the parent id, level and index: every check, on any worker,
// re-derives the same children, so a re-run or a worker killed mid-map never duplicates a
// child, and a completed child's result is reused. A child archived for good (it failed its
// retries, does not fit, or was cancelled) fails the parent with its reason; cancelling
// the parent cancels every child (jobs.Client.Cancel), and a child whose parent is gone
// refuses to run.

// errWaiting ends a parent's check while its children run. It is no failure
// (asynq.Config.IsFailure), so it spends none of the job's retries.
var errWaiting = errors.New("waiting for child jobs")

// partHeaderTokens bounds the tokens JoinPartials adds per partial summary ("## Part 12").
const partHeaderTokens = 8

// promptMargin is kept free in a piece's token limit for the seams where the piece meets the
// prompt template (a token may merge across them) and for the piece number's digits.
const promptMargin = 16

// countTokens is the model's token count of text without special tokens.
func (w *worker) countTokens(text string) int { return len(w.lm.tok.Encode(text, false)) }

// newHierarchy cuts s's document into pieces and sizes the levels for the smallest live
// worker of this model (fleetPositions), so that every worker of the fleet can take every
// piece: a worker serves the queues of the classes below its own.
func (w *worker) newHierarchy(ctx context.Context, s *jobs.Summarize, id string) (jobs.Hierarchy, error) {
	// The prompt around a piece, at its longest: the map prompt with the largest piece
	// numbers, or the final prompt with the payload's instructions.
	overhead := 0
	for _, part := range []*jobs.Part{
		{Parent: id, Level: 0, Index: jobs.MaxPieces - 1, Pieces: jobs.MaxPieces},
		{Parent: id, Level: 1, Index: 0, Pieces: 1, Final: true},
	} {
		pr, err := w.lm.tokenize(&jobs.Summarize{Version: jobs.Version, Input: "x", Instructions: s.Instructions, Part: part})
		if err != nil {
			return jobs.Hierarchy{}, fmt.Errorf("tokenize: %w", err)
		}
		overhead = max(overhead, len(pr.ids)+promptMargin)
	}
	final := s.Sampling().MaxTokens
	positions, who := w.fleetPositions(ctx)
	// An intermediate summary may take a fifth of what a job can hold, so that a reduce job
	// combines at least three of them and the tree narrows at every level.
	partial := min(final, (positions-overhead)/5)
	if partial < 1 {
		return jobs.Hierarchy{}, fmt.Errorf("%w: %s holds at most %d positions, and the summary prompt alone takes %d", planner.ErrDoesNotFit, who, positions, overhead)
	}
	h := jobs.Hierarchy{
		PartialMaxTokens: partial,
		PieceTokens:      positions - partial - overhead,
		FinalTokens:      positions - final - overhead,
	}
	h.GroupTokens = h.PieceTokens
	if need := 2 * (partial + partHeaderTokens); h.FinalTokens < need {
		return h, fmt.Errorf("%w: with max_tokens %d the final summary could read fewer than two partial summaries of %d tokens on %s (%d positions); lower max_tokens to at most %d",
			planner.ErrDoesNotFit, final, partial, who, positions, max(positions-overhead-need, 1))
	}
	overlap := 0
	if s.Overlap != nil {
		overlap = *s.Overlap
	}
	if overlap > h.PieceTokens/2 {
		return h, fmt.Errorf("overlap: %d tokens is more than half of a piece (%d tokens) on this worker", overlap, h.PieceTokens)
	}
	var err error
	if h.Pieces, err = jobs.Split(s.Input, w.countTokens, h.PieceTokens, overlap); err != nil {
		return h, err
	}
	if len(h.Pieces) > jobs.MaxPieces {
		return h, fmt.Errorf("%w: the document makes %d pieces of at most %d tokens, more than %d", planner.ErrDoesNotFit, len(h.Pieces), h.PieceTokens, jobs.MaxPieces)
	}
	h.Levels = []jobs.HierarchyLevel{{Children: childIDs(id, 0, len(h.Pieces)), Final: len(h.Pieces) == 1}}
	return h, nil
}

// fleetPositions is the longest prompt + max_tokens that every live worker of this model
// holds (their published MaxContext), and which worker that is; this worker's own when the
// fleet's capabilities cannot be read.
func (w *worker) fleetPositions(ctx context.Context) (int, string) {
	positions, who := w.maxPrompt(1)+1, "worker "+w.name
	caps, err := w.client.Capabilities(ctx)
	if err != nil {
		w.log.Warn("hierarchical summary: the fleet's capabilities cannot be read; pieces are sized for this worker", "err", err)
		return positions, who
	}
	key := jobs.ModelKey(w.lm.name)
	for _, c := range caps {
		if !c.Draining && c.ModelKey == key && c.MaxContext > 0 && c.MaxContext < positions {
			positions, who = c.MaxContext, "worker "+c.Worker+", the smallest of the fleet,"
		}
	}
	return positions, who
}

func childIDs(parent string, level, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = jobs.ChildID(parent, level, i)
	}
	return ids
}

// wantsHierarchy says whether a summarize job is (or has become) a hierarchical parent
// before it is tokenized as one document.
func (r *run) wantsHierarchy(ctx context.Context, s *jobs.Summarize) (bool, error) {
	switch {
	case s.Part != nil || s.StrategyOf() == jobs.StrategySingle:
		return false, nil
	case s.StrategyOf() == jobs.StrategyHierarchical:
		return true, nil
	}
	// auto: an earlier attempt found the document too long and started a tree.
	_, _, ok, err := r.w.client.LoadHierarchy(ctx, r.queue, r.id)
	return ok, err
}

// checkParent refuses a child whose parent will never read it: cancelled, completed or
// gone. A parent that failed (another child failed) may be replayed once that child is
// fixed, so its other children still run.
func (r *run) checkParent(ctx context.Context, part *jobs.Part) error {
	st, err := r.w.client.Status(ctx, part.Parent)
	var why string
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		why = "gone"
	case err != nil:
		return nil // a Redis error: run the piece anyway, the parent will read it
	case st.State == jobs.StateCompleted:
		why = "completed"
	case st.State == jobs.StateArchived && st.Result != nil && st.Result.FinishReason == jobs.FinishCancelled:
		why = "cancelled"
	default:
		return nil
	}
	r.outcome = outcomeCancelled
	return permanent(fmt.Errorf("parent job %s is %s: this piece is not needed", part.Parent, why))
}

// hierarchical is one check of a hierarchical parent: start the tree, or look at its current
// level and move on to the next when it is done.
func (r *run) hierarchical(ctx context.Context, s *jobs.Summarize) error {
	w := r.w
	r.prog.terminate() // the parent writes its progress itself, once per check
	if n, _ := asynq.GetMaxRetry(ctx); n < 1 {
		// asynq archives a job whose retries are spent whatever IsFailure says: a parent
		// without retries would be archived at its first wait.
		r.outcome = outcomeInvalid
		return permanent(fmt.Errorf("a hierarchical summary needs a max retry of at least 1 (its parent waits for its children as a retry), got %d", n))
	}
	h, raw, ok, err := w.client.LoadHierarchy(ctx, r.queue, r.id)
	if err != nil {
		return err
	}
	if !ok {
		split := time.Now()
		if h, err = w.newHierarchy(ctx, s, r.id); err != nil {
			r.outcome = outcomeDoesNotFit
			return permanent(fmt.Errorf("hierarchical summary on worker %s: %w", w.name, err))
		}
		if err := w.client.SaveHierarchy(ctx, r.queue, r.id, "", h); err != nil && !errors.Is(err, jobs.ErrTreeChanged) {
			return err
		} // else another attempt saved its tree first: the same, read below
		r.log.Info("hierarchical summary", "pieces", len(h.Pieces), "piece_tokens", h.PieceTokens, "partial_max_tokens", h.PartialMaxTokens,
			"input_bytes", len(s.Input), "split", time.Since(split).Round(time.Millisecond))
		if h, raw, _, err = w.client.LoadHierarchy(ctx, r.queue, r.id); err != nil {
			return err
		}
	}
	for {
		level := len(h.Levels) - 1
		results, err := r.levelResults(ctx, s, h, level)
		if err != nil {
			return err
		}
		done := 0
		for _, res := range results {
			if res != nil {
				done++
			}
		}
		phase := jobs.PhaseReduce
		if level == 0 {
			phase = jobs.PhaseMap
		}
		total := len(h.Levels[level].Children)
		r.writeProgress(ctx, jobs.Progress{Phase: phase, Level: level, PiecesDone: done, PiecesTotal: total, MaxTokens: s.Sampling().MaxTokens})
		if done < total {
			r.outcome = outcomeWaiting
			return fmt.Errorf("%w: level %d, %d of %d pieces done", errWaiting, level, done, total)
		}
		if h.Levels[level].Final {
			return r.finishHierarchy(ctx, s, h)
		}
		next, err := r.nextLevel(h, results)
		if err != nil {
			r.outcome = outcomeDoesNotFit
			return permanent(err)
		}
		h.Levels = append(h.Levels, next)
		if err := w.client.SaveHierarchy(ctx, r.queue, r.id, raw, h); err != nil && !errors.Is(err, jobs.ErrTreeChanged) {
			return err
		} // else another attempt added the level first: read it
		if h, raw, _, err = w.client.LoadHierarchy(ctx, r.queue, r.id); err != nil {
			return err
		}
	}
}

// writeProgress publishes a parent's progress; a failed write only delays the display.
func (r *run) writeProgress(ctx context.Context, p jobs.Progress) {
	p.UpdatedAt = time.Now().UTC()
	if _, err := r.out.Write(jobs.EncodeProgress(p)); err != nil {
		r.log.Debug("progress write failed", "err", err)
	}
}

// levelResults enqueues the level's children that do not exist yet and returns the results
// of those that completed (nil for the others). A child archived for good fails the parent.
func (r *run) levelResults(ctx context.Context, s *jobs.Summarize, h jobs.Hierarchy, level int) ([]*jobs.Result, error) {
	w := r.w
	l := h.Levels[level]
	out := make([]*jobs.Result, len(l.Children))
	var prev []*jobs.Result // the level below, read only to enqueue a missing reduce child
	for i, id := range l.Children {
		st, err := w.client.Status(ctx, id)
		if errors.Is(err, jobs.ErrNotFound) {
			if level > 0 && prev == nil {
				if prev, err = r.levelResults(ctx, s, h, level-1); err != nil {
					return nil, err
				}
			}
			if err := r.enqueueChild(ctx, s, h, level, i, prev); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		switch st.State {
		case jobs.StateCompleted:
			if st.Result == nil {
				return nil, fmt.Errorf("child job %s completed without a result", id)
			}
			out[i] = st.Result
		case jobs.StateArchived:
			why := st.LastError
			if st.Result != nil && st.Result.FinishReason == jobs.FinishCancelled {
				why = "cancelled"
			}
			r.outcome = outcomeFailed
			return nil, permanent(fmt.Errorf("piece %d of %d of level %d (job %s) failed: %s", i+1, len(l.Children), level, id, why))
		}
	}
	return out, nil
}

// enqueueChild enqueues child i of level (prev: the level below's results, for a reduce).
func (r *run) enqueueChild(ctx context.Context, s *jobs.Summarize, h jobs.Hierarchy, level, i int, prev []*jobs.Result) error {
	l := h.Levels[level]
	child := &jobs.Summarize{
		Version:      jobs.Version,
		Instructions: s.Instructions,
		MaxTokens:    &h.PartialMaxTokens,
		Strategy:     jobs.StrategySingle,
		Part:         &jobs.Part{Parent: r.id, Level: level, Index: i, Pieces: len(l.Children), Final: l.Final},
		Common: jobs.Common{
			Model: s.Model, Priority: s.Priority, Deadline: s.Deadline, Timeout: s.Timeout,
			IdempotencyKey: l.Children[i],
		},
	}
	if l.Final {
		mt := s.Sampling().MaxTokens
		child.MaxTokens = &mt
		child.ResponseFormat = s.ResponseFormat // the partial summaries stay free text
	}
	if level == 0 {
		sp := h.Pieces[i]
		child.Input = s.Input[sp.Context:sp.End]
	} else {
		g := l.Groups[i]
		texts := make([]string, 0, g[1]-g[0])
		for _, res := range prev[g[0]:g[1]] {
			if res == nil {
				return fmt.Errorf("reduce job %s: a summary of level %d is missing", l.Children[i], level-1)
			}
			texts = append(texts, res.Text)
		}
		child.Input = jobs.JoinPartials(texts)
	}
	if _, err := r.w.client.Enqueue(ctx, child); err != nil && !errors.Is(err, jobs.ErrDuplicate) {
		if errors.Is(err, jobs.ErrBadPayload) {
			r.outcome = outcomeInvalid
			return permanent(fmt.Errorf("child job %s: %w", l.Children[i], err))
		}
		return err
	}
	// The child holds a piece of the document: the API shows it only to the parent's token.
	return r.w.client.InheritOwner(ctx, r.id, l.Children[i])
}

// nextLevel groups a finished level's summaries into the reduce jobs of the next level: one
// final job when they all fit in it, else consecutive groups of as many as fit in one job.
func (r *run) nextLevel(h jobs.Hierarchy, results []*jobs.Result) (jobs.HierarchyLevel, error) {
	level := len(h.Levels)
	if level >= jobs.MaxLevels {
		return jobs.HierarchyLevel{}, fmt.Errorf("the summary tree would need more than %d levels", jobs.MaxLevels)
	}
	tokens := make([]int, len(results))
	for i, res := range results {
		tokens[i] = r.w.countTokens(res.Text) + partHeaderTokens
	}
	groups, final, err := groupPartials(tokens, h.GroupTokens, h.FinalTokens)
	if err != nil {
		return jobs.HierarchyLevel{}, fmt.Errorf("level %d: %w", level, err)
	}
	return jobs.HierarchyLevel{Children: childIDs(r.id, level, len(groups)), Groups: groups, Final: final}, nil
}

// groupPartials groups consecutive partial summaries of the given token counts: all in one
// final group when they fit in final tokens, else in groups of as many as fit in group
// tokens. A level that would not narrow is an error.
func groupPartials(tokens []int, group, final int) ([][2]int, bool, error) {
	sum := 0
	for _, n := range tokens {
		sum += n
	}
	if sum <= final {
		return [][2]int{{0, len(tokens)}}, true, nil
	}
	var groups [][2]int
	for from := 0; from < len(tokens); {
		to, n := from, 0
		for to < len(tokens) && (to == from || n+tokens[to] <= group) {
			n += tokens[to]
			to++
		}
		groups = append(groups, [2]int{from, to})
		from = to
	}
	if len(groups) >= len(tokens) {
		return nil, false, fmt.Errorf("no two partial summaries fit in one reduce job of %d tokens", group)
	}
	return groups, false, nil
}

// finishHierarchy writes the parent's result: the final job's text, plan and worker, usage
// and timings summed over every child, the tree and the pieces.
func (r *run) finishHierarchy(ctx context.Context, s *jobs.Summarize, h jobs.Hierarchy) error {
	w := r.w
	res := jobs.Result{Strategy: jobs.StrategyHierarchical, Pieces: h.Pieces, Tree: &jobs.Tree{}, Metadata: s.Metadata}
	workers := map[string]bool{}
	for _, l := range h.Levels {
		tl := jobs.TreeLevel{Pieces: len(l.Children)}
		for _, id := range l.Children {
			child, err := w.client.Result(ctx, id)
			if err != nil {
				return fmt.Errorf("read child job %s: %w", id, err)
			}
			tl.Usage.Add(child.Usage)
			res.Usage.Add(child.Usage)
			res.Timings.Add(child.Timings, res.Usage)
			workers[child.Worker] = true
			if l.Final {
				res.Text, res.Reasoning, res.FinishReason = child.Text, child.Reasoning, child.FinishReason
				res.Plan, res.Model, res.Worker = child.Plan, child.Model, child.Worker
			}
		}
		res.Tree.Levels = append(res.Tree.Levels, tl)
	}
	for name := range workers {
		res.Workers = append(res.Workers, name)
	}
	sort.Strings(res.Workers)
	return r.complete(ctx, res, s.WebhookURL)
}

// autoSummary is p as a summarize job that decides its own strategy (auto, not a child).
func autoSummary(p jobs.Payload) (*jobs.Summarize, bool) {
	s, ok := p.(*jobs.Summarize)
	return s, ok && s.Part == nil && s.StrategyOf() == jobs.StrategyAuto
}
