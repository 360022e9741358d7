// Package dashboard is asynqmon with our payload formatting, and the fleet page beside it:
// what `redlite dashboard` serves.
package dashboard

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/hibiken/asynqmon"

	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/jobs"
)

// dashboardTextLimit is how much of a long text (a document, a generated summary) the
// dashboard shows: enough to recognize it, not a 2 MiB page.
const dashboardTextLimit = 2000

// Dashboard is asynqmon's web UI and API for the Redis at redisURL, served under rootPath
// ("" or "/…"), with formatters that show our payloads and result envelopes as indented
// JSON with long texts shortened. Close releases its Redis connections.
type Dashboard struct {
	h     *asynqmon.HTTPHandler
	fleet *fleetPage
	root  string
}

// New makes the handler; readOnly hides the buttons that change tasks.
func New(redisURL string, tlsFiles jobs.TLSFiles, rootPath string, readOnly bool) (*Dashboard, error) {
	u, err := redisx.Parse(redisURL)
	if err != nil {
		return nil, err
	}
	if u, err = u.WithTLSFiles(tlsFiles); err != nil {
		return nil, err
	}
	h := asynqmon.New(asynqmon.Options{
		RootPath:         rootPath,
		RedisConnOpt:     u.AsynqOpt(),
		PayloadFormatter: asynqmon.PayloadFormatterFunc(func(_ string, b []byte) string { return FormatPayload(b) }),
		ResultFormatter:  asynqmon.ResultFormatterFunc(func(_ string, b []byte) string { return FormatPayload(b) }),
		ReadOnly:         readOnly,
	})
	// asynqmon makes its own connections from the option; the fleet page has its client.
	client, err := jobs.NewClient(redisURL, jobs.WithTLSFiles(tlsFiles))
	if err != nil {
		h.Close()
		return nil, err
	}
	fp := &fleetPage{client: client}
	return &Dashboard{h: h, fleet: fp, root: strings.TrimSuffix(rootPath, "/")}, nil
}

// ServeHTTP serves the fleet page at FleetPath below the root and asynqmon elsewhere.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case d.root + FleetPath:
		d.fleet.servePage(w, r)
	case d.root + FleetPath + "/":
		// The page's links are relative to FleetPath without the slash.
		http.Redirect(w, r, d.root+FleetPath, http.StatusMovedPermanently)
	case d.root + FleetPath + "/data":
		d.fleet.serveData(w, r)
	default:
		d.h.ServeHTTP(w, r)
	}
}

// Close closes the dashboard's Redis clients.
func (d *Dashboard) Close() error {
	d.fleet.close()
	return d.h.Close()
}

// FormatPayload indents a JSON document and shortens its long strings; anything that is
// not JSON is shown as asynqmon shows it by default.
func FormatPayload(b []byte) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		if utf8.Valid(b) {
			return string(b)
		}
		return "non-printable bytes"
	}
	out, err := json.MarshalIndent(shorten(v), "", "  ")
	if err != nil {
		return string(b)
	}
	return string(out)
}

func shorten(v any) any {
	switch v := v.(type) {
	case string:
		if len(v) > dashboardTextLimit {
			cut := dashboardTextLimit
			for cut > 0 && !utf8.RuneStart(v[cut]) {
				cut--
			}
			return v[:cut] + "… (" + itoa(len(v)) + " bytes in all)"
		}
	case []any:
		for i := range v {
			v[i] = shorten(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = shorten(v[k])
		}
	}
	return v
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
