package dashboard

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"time"

	"github.com/redlite/batch/jobs"
)

// The fleet page sits beside asynqmon in the dashboard (its own path, FleetPath under the
// root): workers with their model, backend, limit and longest job, queues per capacity
// bucket, and every running job with a live progress bar. asynqmon shows a task's result only once it has
// completed, so the progress a worker publishes while a job runs is seen here.

// FleetPath is the fleet page's path below the dashboard's root; its data is at
// FleetPath + "/data" (JSON: workers, fleet, now).
const FleetPath = "/fleet"

//go:embed fleetpage.html
var fleetPageHTML []byte

type fleetPage struct {
	client *jobs.Client
}

// fleetData is what the page renders.
type fleetData struct {
	Workers []jobs.WorkerServer `json:"workers"`
	Fleet   jobs.Fleet          `json:"fleet"`
	Now     time.Time           `json:"now"`
}

func (f *fleetPage) servePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(fleetPageHTML)
}

func (f *fleetPage) serveData(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	ws, err := f.client.Workers(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fl, err := f.client.Fleet(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(fleetData{Workers: ws, Fleet: fl, Now: time.Now().UTC()})
}

func (f *fleetPage) close() {
	_ = f.client.Close()
}
