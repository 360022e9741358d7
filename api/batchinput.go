package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// OpenAI's limits on a batch input file.
const (
	MaxBatchRequests = 50000
	maxCustomIDBytes = 512
	// maxBatchErrors is how many line errors a failed batch reports; the first ones are
	// enough to fix a file, and the batch object stays small.
	maxBatchErrors = 100
)

// BatchLine is one request of a batch input file.
type BatchLine struct {
	Line     int // 1-based line number in the file
	CustomID string
	Body     json.RawMessage
}

// BatchError is an entry of a batch's "errors": what is wrong with the input file.
type BatchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

func lineError(line int, code, param, format string, args ...any) BatchError {
	e := BatchError{Code: code, Message: fmt.Sprintf("line %d: ", line) + fmt.Sprintf(format, args...), Line: &line}
	if param != "" {
		e.Param = &param
	}
	return e
}

// ParseBatchInput reads a batch input file: JSON Lines of {"custom_id", "method": "POST",
// "url": endpoint, "body": {...}}. Blank lines are skipped. It returns the requests, or the
// problems with their line numbers (at most maxBatchErrors of them); the bodies are checked
// later, one by one, so that one bad request fails only itself.
func ParseBatchInput(data []byte, endpoint string) ([]BatchLine, []BatchError) {
	var out []BatchLine
	var errs []BatchError
	add := func(e BatchError) bool {
		errs = append(errs, e)
		return len(errs) < maxBatchErrors
	}
	seen := make(map[string]int)
	n := 0
	for rest := data; len(rest) > 0; {
		var line []byte
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			line, rest = rest, nil
		}
		n++
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(out)+len(errs) >= MaxBatchRequests {
			add(BatchError{Code: "too_many_requests", Message: fmt.Sprintf("the file has more than %d requests, the limit of one batch", MaxBatchRequests)})
			break
		}
		l, err := parseBatchLine(n, line, endpoint)
		if err != nil {
			if !add(*err) {
				break
			}
			continue
		}
		if first, dup := seen[l.CustomID]; dup {
			if !add(lineError(n, "duplicate_custom_id", "custom_id", "custom_id %q is used on line %d already; each must be unique", clip(l.CustomID), first)) {
				break
			}
			continue
		}
		seen[l.CustomID] = n
		out = append(out, l)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if len(out) == 0 {
		return nil, []BatchError{{Code: "empty_file", Message: "the input file has no requests"}}
	}
	return out, nil
}

func parseBatchLine(n int, line []byte, endpoint string) (BatchLine, *BatchError) {
	fail := func(code, param, format string, args ...any) (BatchLine, *BatchError) {
		e := lineError(n, code, param, format, args...)
		return BatchLine{}, &e
	}
	if !utf8.Valid(line) {
		return fail("invalid_json_line", "", "not valid UTF-8")
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(line, &doc); err != nil || doc == nil {
		msg := "not a JSON object"
		if err != nil {
			msg = fmt.Sprintf("not a JSON object: %v", err)
		}
		return fail("invalid_json_line", "", "%s", msg)
	}
	var l BatchLine
	l.Line = n
	for k := range doc {
		switch k {
		case "custom_id", "method", "url", "body":
		default:
			return fail("invalid_request", k, "unknown field %q (want custom_id, method, url, body)", clip(k))
		}
	}
	if err := json.Unmarshal(doc["custom_id"], &l.CustomID); err != nil || l.CustomID == "" {
		return fail("missing_custom_id", "custom_id", "custom_id must be a non-empty string")
	}
	if len(l.CustomID) > maxCustomIDBytes {
		return fail("invalid_custom_id", "custom_id", "custom_id must be at most %d bytes, got %d", maxCustomIDBytes, len(l.CustomID))
	}
	var method, url string
	if err := json.Unmarshal(doc["method"], &method); err != nil || method != "POST" {
		return fail("invalid_method", "method", `method must be "POST"`)
	}
	if err := json.Unmarshal(doc["url"], &url); err != nil || url != endpoint {
		return fail("invalid_url", "url", "url must be %q, the batch's endpoint, got %s", endpoint, clip(string(doc["url"])))
	}
	body := bytes.TrimSpace(doc["body"])
	if len(body) == 0 || body[0] != '{' {
		return fail("invalid_body", "body", "body must be a JSON object")
	}
	l.Body = body
	return l, nil
}
