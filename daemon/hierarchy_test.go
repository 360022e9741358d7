package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/planner"
)

// hierarchyWait bounds the waits of the hierarchical tests: a document of tens of thousands
// of tokens goes through the tiny model in pieces, on a CPU shared with other tests.
const hierarchyWait = 5 * time.Minute

// hierarchyDoc is a report of about tokens tokens of the tiny model: sections with headings,
// paragraphs of numbered sentences.
func hierarchyDoc(tokens int) string {
	var b strings.Builder
	for s := 1; b.Len() < 2*tokens; s++ { // two bytes a token: the tiny model splits digits
		fmt.Fprintf(&b, "# Section %d\n\n", s)
		for p := 1; p <= 4; p++ {
			for i := 1; i <= 5; i++ {
				fmt.Fprintf(&b, "In quarter %d the team of Ana Berg shipped %d units to site %d-%d. ", p, s*100+i, s, i)
			}
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

// TestHierarchicalSummary is issue 14's check: two workers holding a few thousand positions
// of the tiny model summarize a document of ~40K tokens as a tree of child jobs sized for
// the smaller one, so that both run pieces; the same document in one pass is refused with
// the planner's explanation.
func TestHierarchicalSummary(t *testing.T) {
	if testing.Short() {
		t.Skip("hierarchical summaries end to end (-short skips it)")
	}
	b := setup(t)
	cfg := b.cfg
	cfg.HierarchyPoll = 20 * time.Millisecond
	cfg.LogLevel = "info"
	// f16 KV throughout: the sizes below are counted in f16 positions. With q8_0 on the
	// table a worker holds about twice as many, and the document no longer makes ten pieces.
	cfg.KV = "f16"
	// Two Macs of one memory class (512m), mac-b holding about five times what mac-a does;
	// mac-b serves every capacity bucket mac-a does, so it runs pieces sized for mac-a too.
	limits := map[string]int64{"mac-a": hierarchyLimit(t, b, 1500), "mac-b": hierarchyLimit(t, b, 8000)}

	// Children of the parents named in hold wait in their first prefill chunk until the
	// hold is released or the child is cancelled: the test acts mid-map without timing.
	var mu sync.Mutex
	hold := map[string]chan struct{}{}
	started := map[string]map[string]bool{} // parent → children that began prefill
	obs := Observer{PrefillChunk: func(ctx context.Context, id string, done, total int) {
		parent, _, ok := strings.Cut(id, ".l")
		if !ok {
			return
		}
		mu.Lock()
		ch := hold[parent]
		if started[parent] == nil {
			started[parent] = map[string]bool{}
		}
		started[parent][id] = true
		mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
	}}
	for _, name := range []string{"mac-a", "mac-b"} {
		c := cfg
		c.WorkerName, c.GPULimitMiB = name, limits[name]
		startDaemon(t, c, obs)
	}
	// About 40K tokens: within the model's trained context (40,960), beyond what either
	// worker holds, so the planner refuses a single pass for want of memory.
	const docTokens = 30000
	doc := hierarchyDoc(docTokens)
	ctx, cancel := context.WithTimeout(context.Background(), hierarchyWait)
	defer cancel()

	t.Run("Summarized", func(t *testing.T) {
		start := time.Now()
		job := enqueue(t, b.client, &jobs.Summarize{Version: 1, Input: doc, MaxTokens: ptr(16), Common: jobs.Common{IdempotencyKey: "report"}})
		var maxDone int
		res, err := b.client.Wait(ctx, job.ID, func(p jobs.Progress) {
			if p.Phase == jobs.PhaseMap {
				maxDone = max(maxDone, p.PiecesDone)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d bytes, %d pieces summarized in %v; tree:\n%s", len(doc), len(res.Pieces), time.Since(start).Round(time.Millisecond), res.Tree)
		if res.Strategy != jobs.StrategyHierarchical || res.Tree == nil || len(res.Tree.Levels) < 2 {
			t.Fatalf("strategy %q tree %+v: want a hierarchical summary of at least two levels", res.Strategy, res.Tree)
		}
		levels := res.Tree.Levels
		if levels[0].Pieces != len(res.Pieces) || levels[len(levels)-1].Pieces != 1 || len(res.Pieces) < 10 {
			t.Errorf("tree %+v over %d pieces: want a map over every piece (at least 10) narrowing to one", levels, len(res.Pieces))
		}
		for i := 1; i < len(levels); i++ {
			if levels[i].Pieces >= levels[i-1].Pieces {
				t.Errorf("level %d has %d pieces, level %d %d: the tree must narrow", i, levels[i].Pieces, i-1, levels[i-1].Pieces)
			}
		}
		at := 0
		for i, sp := range res.Pieces {
			if sp.Start != at || sp.End <= sp.Start {
				t.Fatalf("piece %d %+v does not follow byte %d", i, sp, at)
			}
			at = sp.End
		}
		if at != len(doc) {
			t.Errorf("pieces end at byte %d of %d", at, len(doc))
		}
		if res.Text == "" || res.Usage.PromptTokens < docTokens {
			t.Errorf("text %q, usage %+v: want a text and every piece read", res.Text, res.Usage)
		}
		if strings.Join(res.Workers, ",") != "mac-a,mac-b" {
			t.Errorf("workers %v: want the children run on both", res.Workers)
		}
		// Every child is a real job, with its parent in its payload, and each level's
		// children exist once: the parent's many checks enqueued none twice.
		total := 0
		for level, l := range levels {
			for i := 0; i < l.Pieces; i++ {
				total++
				id := jobs.ChildID(job.ID, level, i)
				cst, err := b.client.Status(ctx, id)
				if err != nil {
					t.Fatalf("child %s: %v", id, err)
				}
				info, err := b.insp.GetTaskInfo(cst.Queue, id)
				if err != nil {
					t.Fatalf("child %s: %v", id, err)
				}
				s, err := jobs.DecodeSummarize(info.Payload)
				if err != nil {
					t.Fatal(err)
				}
				if s.Part == nil || s.Part.Parent != job.ID || s.Part.Level != level || s.Part.Index != i {
					t.Errorf("child %s payload part %+v", id, s.Part)
				}
				cr, err := b.client.Result(ctx, id)
				if err != nil {
					t.Fatalf("child %s: %v", id, err)
				}
				if level == 0 && (cr.Plan.Context < cr.Usage.TotalTokens || cr.Plan.NeedMiB > cr.Plan.LimitMiB) {
					t.Errorf("piece %d: plan %+v does not hold its %d tokens", i, cr.Plan, cr.Usage.TotalTokens)
				}
			}
		}
		if n := countChildren(t, b, job.ID); n != total {
			t.Errorf("%d child tasks in Redis, the tree has %d", n, total)
		}
	})

	t.Run("SingleIsArchived", func(t *testing.T) {
		// The fewest tokens the document can be (every token 16 bytes) fit mac-b, so the
		// client cannot refuse it: mac-b counts them, and its planner explains.
		single := &jobs.Summarize{Version: 1, Input: doc, MaxTokens: ptr(16), Strategy: jobs.StrategySingle}
		job := enqueue(t, b.client, single)
		st := waitFor(t, b.client, job.ID, "archive", func(st jobs.Status) bool { return st.State == jobs.StateArchived })
		if !strings.Contains(st.LastError, "does not fit on any live worker") || !strings.Contains(st.LastError, "but the limit is") {
			t.Errorf("last error %q: want the planner's explanation", st.LastError)
		}
	})

	// mapOf enqueues a hierarchical summary whose children are held and waits until n of
	// them are running.
	mapOf := func(t *testing.T, key string) (jobs.Job, chan struct{}) {
		release := make(chan struct{})
		mu.Lock()
		hold[key] = release
		mu.Unlock()
		job := enqueue(t, b.client, &jobs.Summarize{Version: 1, Input: doc[:len(doc)/4], MaxTokens: ptr(16),
			Strategy: jobs.StrategyHierarchical, Common: jobs.Common{IdempotencyKey: key}})
		waitUntil(t, "two children running", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(started[key]) >= 2
		})
		return job, release
	}

	t.Run("CancelStopsEveryChild", func(t *testing.T) {
		job, release := mapOf(t, "cancelled-report")
		defer close(release)
		if err := b.client.Cancel(ctx, job.ID); err != nil {
			t.Fatal(err)
		}
		h, _, _, err := b.client.LoadHierarchy(ctx, job.Queue, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range h.Levels[0].Children {
			st, err := b.client.Status(ctx, id)
			if errors.Is(err, jobs.ErrNotFound) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if !st.State.Done() {
				t.Errorf("child %s is %s after its parent was cancelled", id, st.State)
			}
		}
	})

	t.Run("FailedChildFailsParent", func(t *testing.T) {
		job, release := mapOf(t, "failing-report")
		victim := jobs.ChildID(job.ID, 0, 0)
		if err := b.client.Cancel(ctx, victim); err != nil {
			t.Fatal(err)
		}
		// The held children fill both workers: let them go, so that the parent's next
		// check finds a free handler.
		close(release)
		st := waitFor(t, b.client, job.ID, "archive", func(st jobs.Status) bool { return st.State == jobs.StateArchived })
		if !strings.Contains(st.LastError, victim) || !strings.Contains(st.LastError, "cancelled") {
			t.Errorf("parent's last error %q: want the child and its reason", st.LastError)
		}
		// The runbook's replay: the child, then, once it completed, the parent, which
		// finishes from its tree.
		vst, err := b.client.Status(ctx, victim)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.insp.RunTask(vst.Queue, victim); err != nil {
			t.Fatal(err)
		}
		waitFor(t, b.client, victim, "the replayed child to complete", func(st jobs.Status) bool { return st.State == jobs.StateCompleted })
		if err := b.insp.RunTask(job.Queue, job.ID); err != nil {
			t.Fatal(err)
		}
		res, err := b.client.Wait(ctx, job.ID, nil)
		if err != nil || res.Strategy != jobs.StrategyHierarchical || res.Tree.Levels[0].Pieces != 4 {
			t.Errorf("replayed parent: %+v, %v", res, err)
		}
	})

	t.Run("AutoFitsOnePass", func(t *testing.T) {
		job := enqueue(t, b.client, &jobs.Summarize{Version: 1, Input: doc[:2000], MaxTokens: ptr(8)})
		res, err := b.client.Wait(ctx, job.ID, nil)
		if err != nil || res.Strategy != jobs.StrategySingle || res.Tree != nil {
			t.Errorf("result %+v, %v: want one pass", res, err)
		}
	})
}

// TestHierarchicalKill9: a worker killed with SIGKILL in the middle of a hierarchical
// summary's map, and started again, loses nothing: the summary completes, the pieces
// completed before the kill keep their results (the parent reads them, nothing runs them
// again), and the tree's child jobs exist once each. The workers batch (REDLITE_CONCURRENCY
// 4, the default), so pieces are planned against the batch pool.
func TestHierarchicalKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 of a hierarchical summary (-short skips it)")
	}
	b := setup(t)
	cfg := b.cfg
	cfg.GPULimitMiB = hierarchyLimit(t, b, 1500)
	cfg.HierarchyPoll = 20 * time.Millisecond
	cfg.WorkerName = "mac-a"
	p := startDaemonProcess(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), hierarchyWait)
	defer cancel()
	job := enqueue(t, b.client, &jobs.Summarize{Version: 1, Input: hierarchyDoc(20000), MaxTokens: ptr(16), Common: jobs.Common{IdempotencyKey: "killed-report"}})
	total := 0
	waitUntil(t, "two pieces done", func() bool {
		h, _, ok, err := b.client.LoadHierarchy(ctx, job.Queue, job.ID)
		if err != nil || !ok {
			return false
		}
		total = len(h.Pieces)
		done := 0
		for _, id := range h.Levels[0].Children {
			if st, err := b.client.Status(ctx, id); err == nil && st.State == jobs.StateCompleted {
				done++
			}
		}
		return done >= 2
	})
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	before := map[string]jobs.Status{}
	for i := 0; i < total; i++ {
		id := jobs.ChildID(job.ID, 0, i)
		if cst, err := b.client.Status(ctx, id); err == nil && cst.State == jobs.StateCompleted {
			before[id] = cst
		}
	}
	if len(before) < 2 || len(before) == total {
		t.Fatalf("%d of %d pieces completed at the kill: want the kill mid-map", len(before), total)
	}
	startDaemonProcess(t, cfg) // launchd starts it again
	res, err := b.client.Wait(ctx, job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Strategy != jobs.StrategyHierarchical || len(res.Pieces) != total || res.Text == "" {
		t.Fatalf("result: strategy %q, %d pieces (want %d), text %q", res.Strategy, len(res.Pieces), total, res.Text)
	}
	for id, was := range before {
		now, err := b.client.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if now.State != jobs.StateCompleted || !now.CompletedAt.Equal(was.CompletedAt) || now.Result.Text != was.Result.Text || now.Retried != 0 {
			t.Errorf("piece %s ran again after the kill: before %+v, after %+v", id, was, now)
		}
	}
	n := 0
	for _, l := range res.Tree.Levels {
		n += l.Pieces
	}
	if got := countChildren(t, b, job.ID); got != n {
		t.Errorf("%d child tasks in Redis, the tree has %d", got, n)
	}
	t.Logf("%d of %d pieces were done at the kill; tree:\n%s", len(before), total, res.Tree)
}

// hierarchyLimit is the GPU limit at which the tiny model holds a job of promptTokens prompt
// tokens and 16 generated ones alone (f16 KV gives it about twice that).
func hierarchyLimit(t *testing.T, b *testBundle, promptTokens int) int64 {
	t.Helper()
	lm, err := loadModel(b.model, "", engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.close()
	job := planner.Job{PromptTokens: promptTokens, MaxTokens: 16, Slots: 1, Policy: planner.Policy{MaxChunk: b.cfg.MaxChunk}}
	p, err := planner.Choose(job, lm.profile, planner.CPUPlaceholder(), planner.Budget{LimitMiB: 1 << 20, Source: planner.SourceOverride})
	if err != nil {
		t.Fatal(err)
	}
	return p.NeedMiB
}

// countChildren counts the tasks of every state whose id marks them a child of parent.
func countChildren(t *testing.T, b *testBundle, parent string) int {
	t.Helper()
	n := 0
	queues, err := b.insp.Queues()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		lists := []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
			b.insp.ListPendingTasks, b.insp.ListActiveTasks, b.insp.ListScheduledTasks,
			b.insp.ListRetryTasks, b.insp.ListArchivedTasks, b.insp.ListCompletedTasks,
		}
		for _, list := range lists {
			tasks, err := list(q, asynq.PageSize(10000))
			if err != nil && !strings.Contains(err.Error(), "not found") {
				t.Fatal(err)
			}
			for _, ti := range tasks {
				if strings.HasPrefix(ti.ID, parent+".l") {
					n++
				}
			}
		}
	}
	return n
}

func TestGroupPartials(t *testing.T) {
	for _, c := range []struct {
		name          string
		tokens        []int
		group, final  int
		want          [][2]int
		wantFinal     bool
		wantErrSubstr string
	}{
		{"AllFitTheFinal", []int{10, 10, 10}, 25, 30, [][2]int{{0, 3}}, true, ""},
		{"GroupsAsManyAsFit", []int{10, 10, 10, 10, 10}, 25, 40, [][2]int{{0, 2}, {2, 4}, {4, 5}}, false, ""},
		{"DoesNotNarrow", []int{20, 20, 20}, 30, 50, nil, false, "no two partial summaries fit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, final, err := groupPartials(c.tokens, c.group, c.final)
			if c.wantErrSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErrSubstr) {
					t.Fatalf("error %v, want %q", err, c.wantErrSubstr)
				}
				return
			}
			if err != nil || final != c.wantFinal || fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("groupPartials = %v, %v, %v; want %v, %v", got, final, err, c.want, c.wantFinal)
			}
		})
	}
	// Levels narrow until one remains: 100 partials of 10 tokens, groups of 35, final 40.
	tokens := make([]int, 100)
	for i := range tokens {
		tokens[i] = 10
	}
	levels := 0
	for {
		groups, final, err := groupPartials(tokens, 35, 40)
		if err != nil {
			t.Fatal(err)
		}
		levels++
		if final {
			break
		}
		tokens = tokens[:len(groups)]
	}
	if levels != 4 { // 100 → 34 → 12 → 4 → final
		t.Errorf("%d reduce levels, want 4", levels)
	}
}
