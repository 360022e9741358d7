package model

import (
	"strings"
	"testing"
)

type stateA struct{ State }
type stateB struct{ State }

func TestRunStates(t *testing.T) {
	a1, a2 := &stateA{}, &stateA{}
	got := RunStates[*stateA]([]Run{{State: a1}, {State: a2}})
	if len(got) != 2 || got[0] != a1 || got[1] != a2 {
		t.Fatalf("RunStates = %v, want the runs' states in order", got)
	}
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "run 1 holds a *model.stateB") || !strings.Contains(msg, "*model.stateA") {
			t.Errorf("panic %q does not name the run and both types", msg)
		}
	}()
	RunStates[*stateA]([]Run{{State: a1}, {State: &stateB{}}})
	t.Error("a foreign state type did not panic")
}
