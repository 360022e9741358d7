package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSummarizeStrategyValidation(t *testing.T) {
	for _, c := range []struct {
		name string
		json string
		want string // "" when valid
	}{
		{"V1WithoutStrategy", `{"version":1,"input":"doc"}`, ""},
		{"Hierarchical", `{"version":1,"input":"doc","strategy":"hierarchical","overlap":32}`, ""},
		{"Child", `{"version":1,"input":"doc","strategy":"single","part":{"parent":"a-b","level":2,"index":1,"pieces":3}}`, ""},
		{"UnknownStrategy", `{"version":1,"input":"doc","strategy":"fast"}`, "strategy: must be one of auto, single, hierarchical"},
		{"Overlap", `{"version":1,"input":"doc","overlap":5000}`, "overlap: must be between 0 and 1024"},
		{"ChildNotSingle", `{"version":1,"input":"doc","strategy":"auto","part":{"parent":"p","level":0,"index":0,"pieces":1}}`, "strategy: a part of a hierarchical summary runs in one pass"},
		{"IndexBeyondPieces", `{"version":1,"input":"doc","part":{"parent":"p","level":0,"index":3,"pieces":3}}`, "part.index"},
		{"BadParent", `{"version":1,"input":"doc","part":{"parent":"p\u0000","level":0,"index":0,"pieces":1}}`, "part.parent"},
		{"Level", `{"version":1,"input":"doc","part":{"parent":"p","level":32,"index":0,"pieces":1}}`, "part.level"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeSummarize([]byte(c.json))
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrBadPayload) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestChildID(t *testing.T) {
	if got := ChildID("job-1", 0, 7); got != "job-1.l0.p7" {
		t.Errorf("ChildID = %q", got)
	}
	long := strings.Repeat("k", MaxIdempotencyKeyLen)
	id := ChildID(long, 31, MaxPieces-1)
	if len(id) > MaxIdempotencyKeyLen || id == ChildID(long+"x", 31, MaxPieces-1) {
		t.Errorf("ChildID of a long parent = %q: want ≤ %d bytes, distinct per parent", id, MaxIdempotencyKeyLen)
	}
	for _, parent := range []string{long, "raw client id/with spaces", "ünïcode"} {
		if err := (&Common{IdempotencyKey: ChildID(parent, 3, 9)}).validate(); err != nil {
			t.Errorf("child id of %q is no valid key: %v", parent, err)
		}
	}
}

func TestPartPrompts(t *testing.T) {
	ins := &Instructions{Style: StyleBullets, Language: "German", Focus: "costs"}
	mapJob := SummarizeMessages(&Summarize{Version: 1, Input: "text", Instructions: ins, Part: &Part{Parent: "p", Level: 0, Index: 1, Pieces: 4}})
	for _, want := range []string{"Summarize part 2 of 4 of a longer document", "every name, number, date and quantity", "concerns: costs"} {
		if !strings.Contains(mapJob[1].Content, want) {
			t.Errorf("map prompt lacks %q:\n%s", want, mapJob[1].Content)
		}
	}
	if strings.Contains(mapJob[1].Content, "German") || strings.Contains(mapJob[1].Content, "bulleted") {
		t.Errorf("map prompt applies the final instructions:\n%s", mapJob[1].Content)
	}
	final := SummarizeMessages(&Summarize{Version: 1, Input: JoinPartials([]string{"a", "b"}), Instructions: ins, Part: &Part{Parent: "p", Level: 1, Index: 0, Pieces: 1, Final: true}})
	for _, want := range []string{"summaries of consecutive parts", "## Part 2", "bulleted list", "in German", "Focus on: costs"} {
		if !strings.Contains(final[1].Content, want) {
			t.Errorf("final prompt lacks %q:\n%s", want, final[1].Content)
		}
	}
	// A hierarchical summary of one piece is an ordinary summary.
	one := SummarizeMessages(&Summarize{Version: 1, Input: "text", Instructions: ins, Part: &Part{Parent: "p", Pieces: 1, Final: true}})
	if plain := SummarizeMessages(&Summarize{Version: 1, Input: "text", Instructions: ins}); one[1] != plain[1] || one[0] != plain[0] {
		t.Errorf("a final level-0 part's prompt differs from the plain one")
	}
}

// TestHierarchyState: the tree is saved with a compare-and-set in the parent's task hash, and
// cancelling the parent cancels every child it lists.
func TestHierarchyState(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	parent, err := c.Enqueue(ctx, &Summarize{Version: 1, Input: "doc", Strategy: StrategyHierarchical})
	if err != nil {
		t.Fatal(err)
	}
	h := Hierarchy{Pieces: []Span{{Start: 0, End: 3}}, Levels: []HierarchyLevel{{Children: []string{ChildID(parent.ID, 0, 0), ChildID(parent.ID, 0, 1)}}}}
	if err := c.SaveHierarchy(ctx, parent.Queue, parent.ID, "", h); err != nil {
		t.Fatal(err)
	}
	got, raw, ok, err := c.LoadHierarchy(ctx, parent.Queue, parent.ID)
	if err != nil || !ok || len(got.Levels) != 1 || got.Levels[0].Children[1] != h.Levels[0].Children[1] {
		t.Fatalf("load: %+v %v %v", got, ok, err)
	}
	if err := c.SaveHierarchy(ctx, parent.Queue, parent.ID, "", h); !errors.Is(err, ErrTreeChanged) {
		t.Errorf("a second first save: %v, want ErrTreeChanged", err)
	}
	if err := c.SaveHierarchy(ctx, parent.Queue, "nope", "", h); !errors.Is(err, ErrNotFound) {
		t.Errorf("save on a missing job: %v, want ErrNotFound", err)
	}
	h.Levels = append(h.Levels, HierarchyLevel{Children: []string{ChildID(parent.ID, 1, 0)}, Final: true})
	if err := c.SaveHierarchy(ctx, parent.Queue, parent.ID, raw, h); err != nil {
		t.Fatalf("save over the state read: %v", err)
	}
	for i := range 2 {
		part := &Part{Parent: parent.ID, Index: i, Pieces: 2}
		if _, err := c.Enqueue(ctx, &Summarize{Version: 1, Input: "piece", Part: part, Common: Common{IdempotencyKey: ChildID(parent.ID, 0, i)}}); err != nil {
			t.Fatal(err)
		}
	}
	// A parent submitted through redlite-api has an owner; its children get it.
	c.rdb.Set(ctx, JobOwnerKey(parent.ID), "token-a", time.Hour)
	child := ChildID(parent.ID, 0, 0)
	if err := c.InheritOwner(ctx, parent.ID, child); err != nil {
		t.Fatal(err)
	}
	if owner, _ := c.rdb.Get(ctx, JobOwnerKey(child)).Result(); owner != "token-a" {
		t.Errorf("child's owner %q, want the parent's", owner)
	}
	if err := c.InheritOwner(ctx, "ownerless", ChildID("ownerless", 0, 0)); err != nil || c.rdb.Exists(ctx, JobOwnerKey(ChildID("ownerless", 0, 0))).Val() != 0 {
		t.Errorf("a parent without an owner gave its child one (%v)", err)
	}
	if err := c.Cancel(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		st, err := c.Status(ctx, ChildID(parent.ID, 0, i))
		if err != nil || st.State != StateArchived || st.Result == nil || st.Result.FinishReason != FinishCancelled {
			t.Errorf("child %d after the parent's cancel: %+v %v", i, st, err)
		}
	}
}
