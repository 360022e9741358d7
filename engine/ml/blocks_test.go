package ml

import (
	"errors"
	"slices"
	"testing"
)

func TestBlockList(t *testing.T) {
	l := NewBlockList(4, 16)
	a, err := l.Take(20) // 2 blocks, the lowest first
	if err != nil || !slices.Equal(a, []int32{1, 0}) {
		t.Fatalf("Take(20) = %v, %v; want [1 0]", a, err)
	}
	if _, err := l.Take(33); !errors.Is(err, ErrPoolFull) {
		t.Errorf("Take(33) with 2 blocks free: %v, want ErrPoolFull", err)
	}
	if _, err := l.Take(0); err == nil {
		t.Error("Take(0) succeeded")
	}
	l.Give(a)
	if l.Free() != 4 {
		t.Errorf("%d free after Give, want 4", l.Free())
	}
	l.Close()
	l.Give(a) // harmless
	if _, err := l.Take(1); err == nil || !l.Closed() {
		t.Errorf("Take after Close: %v", err)
	}
}

// TestBlockListSharing holds a cache's first blocks by reference, starts another cache with
// them and checks that a block is free only when its last holder gave it back.
func TestBlockListSharing(t *testing.T) {
	l := NewBlockList(6, 16)
	a, err := l.Take(40) // 3 blocks
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.Hold(a[:2])
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.TakeAfter(h, 50) // the 2 shared and 2 fresh
	if err != nil || len(b) != 4 || !slices.Equal(b[:2], a[:2]) {
		t.Fatalf("TakeAfter = %v, %v; want %v then 2 fresh", b, err, a[:2])
	}
	if l.Free() != 1 {
		t.Errorf("%d free, want 1", l.Free())
	}
	l.Give(a)
	if l.Free() != 2 { // a's own third block
		t.Errorf("%d free after the first cache, want 2", l.Free())
	}
	if got := h.Holders(a[:2]); !slices.Equal(got, []int{2, 2}) {
		t.Errorf("holders %v, want [2 2]", got)
	}
	h.Release()
	h.Release() // harmless
	l.Give(b)
	if l.Free() != 6 {
		t.Errorf("%d free after every holder let go, want 6", l.Free())
	}
	if _, err := l.TakeAfter(h, 40); err == nil {
		t.Error("TakeAfter with released blocks succeeded")
	}
	if _, err := l.Hold([]int32{0}); err == nil {
		t.Error("Hold of a free block succeeded")
	}
	if _, err := l.TakeAfter(&SharedBlocks{list: NewBlockList(2, 16)}, 16); err == nil {
		t.Error("TakeAfter with another list's blocks succeeded")
	}
}
