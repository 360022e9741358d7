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
