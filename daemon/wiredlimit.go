package daemon

import (
	"fmt"

	"github.com/redlite/batch/planner"
)

// On a Mac the GPU may wire at most iogpu.wired_limit_mb of memory (0: macOS's default,
// about two thirds to three quarters of RAM); ops/launchd's com.redlite.wired-limit job
// raises it at boot, and the Metal device's recommendedMaxWorkingSetSize, which the planner
// plans into, follows it. A failed sysctl would otherwise go unnoticed: redlited reads it
// at start, exports it (redlite_iogpu_wired_limit_bytes), shows it in /readyz and its start
// log, and warns when the planner's limit disagrees with it.

// readWiredLimit reads iogpu.wired_limit_mb: ok is false where there is no such setting
// (not macOS). A variable so that tests can stand in for a Mac.
var readWiredLimit = wiredLimitMiB

// wiredLimitTolerance is how far (as a share of the wired limit) the planner's limit may
// differ from it before redlited warns: Metal's recommended working set is a little below
// the wired limit.
const wiredLimitTolerance = 0.05

// wiredLimitProblem says what is wrong with the planner's budget against the wired limit
// of wiredMiB ("" when they agree).
func wiredLimitProblem(wiredMiB int64, b planner.Budget) string {
	if wiredMiB == 0 {
		return fmt.Sprintf("iogpu.wired_limit_mb is 0 (the macOS default): the com.redlite.wired-limit LaunchDaemon has not raised it (see /Library/Logs/redlite/wired-limit.log); the planner plans into %d MiB", b.LimitMiB)
	}
	tol := int64(float64(wiredMiB) * wiredLimitTolerance)
	switch {
	case b.LimitMiB > wiredMiB:
		return fmt.Sprintf("the planner's limit %d MiB (%s) is above iogpu.wired_limit_mb=%d: jobs may be planned into memory the GPU cannot wire; lower REDLITE_GPU_LIMIT_MIB or raise the wired limit", b.LimitMiB, b.Source, wiredMiB)
	case b.LimitMiB < wiredMiB-tol:
		return fmt.Sprintf("the planner's limit %d MiB (%s) is well below iogpu.wired_limit_mb=%d: the wired limit was raised after redlited started, or REDLITE_GPU_LIMIT_MIB is low; restart redlited or raise REDLITE_GPU_LIMIT_MIB", b.LimitMiB, b.Source, wiredMiB)
	}
	return ""
}
