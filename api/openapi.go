package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/redlite/batch/jobs"
)

// The OpenAPI 3.1 document at /v1/openapi.json. Its operations are the routing table
// (Server.routes registers exactly these, and refuses to start with a handler missing or
// left over); the schemas of what the handlers write are generated from their Go types,
// and the payload and result schemas are jobs/schema's own.

type operation struct {
	method, path, summary string
	request               any      // a Go value whose type is the JSON body, or a schema map
	requestType           string   // content type of the request; JSON when empty
	query                 []string // query parameters, all optional strings
	responses             map[string]any
}

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

func jsonResp(desc string, schema any) map[string]any {
	return map[string]any{"description": desc, "content": map[string]any{"application/json": map[string]any{"schema": schema}}}
}

func errResp(desc string) map[string]any { return jsonResp(desc, ref("ErrorBody")) }

func operations() []operation {
	jobReq := map[string]any{"type": "object", "required": []string{"type", "version"},
		"description": `"type" beside the fields of the payload of that type (jobs/README): generate.v1.json or summarize.v1.json.`,
		"properties":  map[string]any{"type": map[string]any{"enum": []string{jobs.TypeGenerate, jobs.TypeSummarize}}},
		"oneOf": []any{
			map[string]any{"$ref": "#/components/schemas/GeneratePayload"},
			map[string]any{"$ref": "#/components/schemas/SummarizePayload"},
		}}
	sse := func(desc string) map[string]any {
		return map[string]any{"description": desc, "content": map[string]any{"text/event-stream": map[string]any{"schema": map[string]any{"type": "string"}}}}
	}
	common := map[string]any{"401": errResp("missing or invalid bearer token"), "429": errResp("rate limit of the token (rate_limit_exceeded)"),
		"503": errResp("Redis refuses writes (at its maxmemory) or credentials: redis_unavailable, with Retry-After")}
	notYours := "no such job, or another token's (every token sees only its own)"
	limits := func(m map[string]any, desc string) map[string]any {
		m["429"] = errResp("rate limit of the token (rate_limit_exceeded), or " + desc)
		return m
	}
	with := func(m map[string]any) map[string]any {
		for k, v := range common {
			m[k] = v
		}
		return m
	}
	return []operation{
		{method: "POST", path: "/v1/jobs", summary: "Submit a summarize or generate job", request: jobReq, responses: limits(with(map[string]any{
			"201": jsonResp("enqueued; an idempotency key becomes the id \"<token digest>.<key>\"", ref("Job")), "200": jsonResp("this token has a job with this idempotency key", ref("Job")),
			"400": errResp("invalid payload, naming the field; context_length_exceeded: no live worker can hold the job"), "404": errResp("model_not_found: no live worker serves the model"),
			"409": errResp("idempotency_key_in_use: the id is taken by a job enqueued outside the API; idempotency_conflict: the key was used with another body"), "413": errResp("body too large")}), "too_many_queued_jobs: the token's unfinished jobs are at REDLITE_API_MAX_QUEUED_JOBS")},
		{method: "GET", path: "/v1/jobs/{id}", summary: "A job's state, progress, last error and result", responses: with(map[string]any{
			"200": jsonResp("the job", ref("Job")), "404": errResp(notYours)})},
		{method: "GET", path: "/v1/jobs/{id}/result", summary: "A job's result; ?wait=30s long-polls", query: []string{"wait"}, responses: with(map[string]any{
			"200": jsonResp("completed", ref("Result")), "202": jsonResp("not done yet", ref("Job")),
			"409": errResp("failed or cancelled"), "400": errResp("bad wait"), "404": errResp(notYours)})},
		{method: "GET", path: "/v1/jobs/{id}/events", summary: "Server-Sent Events: progress and text deltas, then result or error; Last-Event-ID resumes", responses: with(map[string]any{
			"200": sse("event: progress (data: Progress) and event: delta (data: {text, reasoning, gap}, with an id that Last-Event-ID takes back), event: reset (data: {attempt}) if the text sent is void, then event: result (data: Result) or event: error (data: ErrorBody)"),
			"400": errResp("bad Last-Event-ID"), "404": errResp(notYours)})},
		{method: "DELETE", path: "/v1/jobs/{id}", summary: "Cancel a job", responses: with(map[string]any{
			"200": jsonResp("cancelled", ref("Job")), "409": errResp("already finished"), "404": errResp(notYours)})},
		{method: "GET", path: "/v1/workers", summary: "The worker fleet; other tokens' running jobs show without their ids", responses: with(map[string]any{"200": jsonResp("workers", listOf("Worker"))})},
		{method: "GET", path: "/v1/models", summary: "Models the fleet serves (OpenAI's shape)", responses: with(map[string]any{"200": jsonResp("models", listOf("Model"))})},
		{method: "GET", path: "/v1/models/{id}", summary: "One model the fleet serves", responses: with(map[string]any{
			"200": jsonResp("the model", ref("Model")), "404": errResp("model_not_found: no live worker serves it")})},
		{method: "POST", path: "/v1/files", summary: "Upload a batch input file (multipart: purpose=batch, file)", requestType: "multipart/form-data",
			request: map[string]any{"type": "object", "required": []string{"purpose", "file"}, "properties": map[string]any{
				"purpose": map[string]any{"const": purposeBatch}, "file": map[string]any{"type": "string", "contentMediaType": "application/octet-stream"}}},
			responses: with(map[string]any{"200": jsonResp("stored", ref("File")), "400": errResp("bad form"),
				"413": errResp("request_too_large: the file is above REDLITE_API_MAX_FILE_BYTES; storage_quota_exceeded: the token's stored files would pass REDLITE_API_MAX_STORED_BYTES")})},
		{method: "GET", path: "/v1/files", summary: "The token's files, newest first (after, limit)", query: []string{"after", "limit"}, responses: with(map[string]any{"200": jsonResp("files", listOf("File"))})},
		{method: "GET", path: "/v1/files/{id}", summary: "A file's metadata", responses: with(map[string]any{"200": jsonResp("file", ref("File")), "404": errResp("no such file, or another token's")})},
		{method: "GET", path: "/v1/files/{id}/content", summary: "A file's bytes", responses: with(map[string]any{
			"200": map[string]any{"description": "the bytes", "content": map[string]any{"application/octet-stream": map[string]any{"schema": map[string]any{"type": "string"}}}},
			"404": errResp("no such file, or another token's")})},
		{method: "DELETE", path: "/v1/files/{id}", summary: "Delete a file (and its bytes from the token's stored bytes)", responses: with(map[string]any{"200": jsonResp("deleted", map[string]any{"type": "object"}), "404": errResp("no such file, or another token's")})},
		{method: "POST", path: "/v1/batches", summary: "Create a batch from an uploaded file", request: BatchRequest{}, responses: limits(with(map[string]any{
			"200": jsonResp("created (validating)", ref("Batch")), "400": errResp("bad request"), "404": errResp("no such input file, or another token's")}),
			"too_many_queued_batches: the token's unfinished batches are at REDLITE_API_MAX_QUEUED_BATCHES")},
		{method: "GET", path: "/v1/batches", summary: "The token's batches, newest first (after, limit)", query: []string{"after", "limit"}, responses: with(map[string]any{"200": jsonResp("batches", listOf("Batch"))})},
		{method: "GET", path: "/v1/batches/{id}", summary: "A batch", responses: with(map[string]any{"200": jsonResp("batch", ref("Batch")), "404": errResp("no such batch, or another token's")})},
		{method: "POST", path: "/v1/batches/{id}/cancel", summary: "Cancel a batch", responses: with(map[string]any{
			"200": jsonResp("cancelling", ref("Batch")), "409": errResp("already final"), "404": errResp("no such batch, or another token's")})},
		{method: "GET", path: "/v1/webhook_secret", summary: "The secret that signs the webhooks of this token's jobs", responses: with(map[string]any{
			"200": jsonResp("the secret", ref("WebhookSecret")), "404": errResp("webhooks are not signed")})},
		textOperation(chatEndpoint, "Run one chat as a job and wait (stream: true for SSE chunks)",
			"chat.completion, or chat.completion.chunk events with stream", "ChatCompletion", chatRequestSchema(), limits, with),
		textOperation(completionsEndpoint, "Continue one raw prompt (no chat template) as a job and wait (stream: true for SSE chunks)",
			"text_completion, or text_completion events with stream", "TextCompletion", completionRequestSchema(), limits, with),
		textOperation(responsesEndpoint, "Answer one input (a string or messages) as a job and wait (stream: true for the response.* events)",
			"response, or response.* events with stream", "Response", responseRequestSchema(), limits, with),
	}
}

// textOperation is one of the OpenAI text routes (chat.go's textRoute).
func textOperation(path, summary, answer, schema string, request map[string]any, limits func(map[string]any, string) map[string]any, with func(map[string]any) map[string]any) operation {
	return operation{method: "POST", path: path, summary: summary, request: request,
		responses: limits(with(map[string]any{"200": map[string]any{"description": answer,
			"content": map[string]any{"application/json": map[string]any{"schema": ref(schema)}, "text/event-stream": map[string]any{"schema": map[string]any{"type": "string"}}}},
			"400": errResp("unsupported or invalid parameter (n above 8 among them); context_length_exceeded"), "404": errResp("model_not_found"), "409": errResp("the job was cancelled; idempotency_conflict"),
			"500": errResp("job_failed"), "504": errResp("timeout: the job outlasted REDLITE_API_MAX_WAIT")}),
			"too_many_queued_jobs: the token's unfinished jobs are at REDLITE_API_MAX_QUEUED_JOBS")}
}

// payloadProps points the request parameters that map to the payload unchanged at the
// payload's own schema (one definition of each limit).
func payloadProps(names ...string) map[string]any {
	props := map[string]any{}
	for _, p := range names {
		props[p] = map[string]any{"$ref": "#/components/schemas/GeneratePayload/properties/" + p}
	}
	return props
}

// sampling are the parameters the text routes share.
var sampling = []string{"temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty", "repetition_penalty"}

func chatRequestSchema() map[string]any {
	props := payloadProps(append(sampling, "logprobs", "top_logprobs", "n")...)
	props["response_format"] = map[string]any{"$ref": "#/components/schemas/GeneratePayload/$defs/response_format"}
	return map[string]any{"type": "object", "required": []string{"messages"}, "properties": props,
		"description": "OpenAI's chat completion request; unsupported parameters are refused by name; stream_options only with stream: true. response_format is enforced while the text is generated; a schema keyword the grammar cannot enforce is a 400 naming it. n (1 to 8) completions share one prefill."}
}

func completionRequestSchema() map[string]any {
	props := payloadProps(append(sampling, "n")...)
	props["prompt"] = map[string]any{"anyOf": []any{map[string]any{"type": "string", "minLength": 1},
		map[string]any{"type": "array", "items": map[string]any{"type": "string", "minLength": 1}, "minItems": 1, "maxItems": 1}}}
	props["logprobs"] = map[string]any{"type": "integer", "minimum": 0, "maximum": jobs.MaxTopLogprobs,
		"description": "The chosen token's logprob and this many alternatives, in the completions route's shape."}
	props["response_format"] = map[string]any{"$ref": "#/components/schemas/GeneratePayload/$defs/response_format"}
	return map[string]any{"type": "object", "required": []string{"prompt"}, "properties": props,
		"description": "OpenAI's (legacy) completion request: the prompt is continued as it is, without the chat template. One prompt per request; echo, suffix and best_of other than 1 are refused."}
}

func responseRequestSchema() map[string]any {
	props := payloadProps(sampling...)
	props["input"] = map[string]any{"anyOf": []any{map[string]any{"type": "string"},
		map[string]any{"type": "array", "items": map[string]any{"type": "object", "required": []string{"role", "content"}}}}}
	props["instructions"] = map[string]any{"type": "string", "description": "The system message."}
	props["max_output_tokens"] = map[string]any{"$ref": "#/components/schemas/GeneratePayload/properties/max_tokens"}
	props["text"] = map[string]any{"type": "object", "properties": map[string]any{"format": map[string]any{"type": "object",
		"description": "text, json_object, or json_schema with name, schema and strict beside the type: enforced while the text is generated, as response_format is."}}}
	return map[string]any{"type": "object", "required": []string{"input"}, "properties": props,
		"description": "OpenAI's responses request, for text answers: no tools, no previous_response_id, nothing stored."}
}

func listOf(name string) map[string]any {
	return map[string]any{"type": "object", "properties": map[string]any{"object": map[string]any{"const": "list"}, "data": map[string]any{"type": "array", "items": ref(name)}}}
}

// schemaTypes are the Go types whose schemas the document holds, by name.
var schemaTypes = map[string]reflect.Type{
	"Job":            reflect.TypeFor[JobView](),
	"File":           reflect.TypeFor[File](),
	"Batch":          reflect.TypeFor[Batch](),
	"BatchRequest":   reflect.TypeFor[BatchRequest](),
	"Model":          reflect.TypeFor[Model](),
	"ChatCompletion": reflect.TypeFor[ChatCompletion](),
	"TextCompletion": reflect.TypeFor[TextCompletion](),
	"Response":       reflect.TypeFor[Response](),
	"ErrorBody":      reflect.TypeFor[errorBody](),
	"BatchLine":      reflect.TypeFor[BatchOutputLine](),
	"WebhookSecret":  reflect.TypeFor[WebhookSecret](),
	"Worker":         reflect.TypeFor[jobs.WorkerServer](),
}

// goSchema is the JSON Schema of what encoding/json writes for t.
func goSchema(t reflect.Type) map[string]any {
	nullable := false
	for t.Kind() == reflect.Pointer {
		t, nullable = t.Elem(), true
	}
	var s map[string]any
	switch {
	case t == reflect.TypeFor[time.Time]():
		s = map[string]any{"type": "string", "format": "date-time"}
	case t == reflect.TypeFor[json.RawMessage]():
		s = map[string]any{}
	case t == reflect.TypeFor[jobs.Result]():
		s = ref("Result")
	case t == reflect.TypeFor[jobs.Progress]():
		s = ref("Progress")
	default:
		switch t.Kind() {
		case reflect.String:
			s = map[string]any{"type": "string"}
		case reflect.Bool:
			s = map[string]any{"type": "boolean"}
		case reflect.Int, reflect.Int64, reflect.Int32:
			s = map[string]any{"type": "integer"}
		case reflect.Float64, reflect.Float32:
			s = map[string]any{"type": "number"}
		case reflect.Slice:
			s = map[string]any{"type": "array", "items": goSchema(t.Elem())}
		case reflect.Map:
			s = map[string]any{"type": "object", "additionalProperties": goSchema(t.Elem())}
		case reflect.Interface:
			s = map[string]any{}
		case reflect.Struct:
			props := map[string]any{}
			var required []string
			addFields(t, props, &required)
			s = map[string]any{"type": "object", "properties": props}
			if len(required) > 0 {
				s["required"] = required
			}
		default:
			s = map[string]any{}
		}
	}
	if nullable {
		return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
	}
	return s
}

// addFields adds t's JSON fields, flattening embedded structs as encoding/json does.
func addFields(t reflect.Type, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			addFields(f.Type, props, required)
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = goSchema(f.Type)
		if !strings.Contains(opts, "omitempty") {
			*required = append(*required, name)
		}
	}
}

// inDocument makes the job schema named name (jobs.Schema) a schema of the document's: its
// $id and $schema go, and its $refs, relative to its $id ("#/$defs/x", "generate.v1.json#/…"),
// become pointers into the document, which is what openapi-typescript and swagger-parser
// resolve (they ignore $id and look for generate.v1.json beside the document). files maps
// the schema files to their names under components.schemas.
func inDocument(schema map[string]any, name string, files map[string]string) error {
	delete(schema, "$id")
	delete(schema, "$schema")
	var walk func(v any) error
	walk = func(v any) error {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				file, frag, _ := strings.Cut(r, "#")
				to := name
				if file != "" {
					if to, ok = files[file]; !ok {
						return fmt.Errorf("$ref %q: %s is not in the document", r, file)
					}
				}
				v["$ref"] = "#/components/schemas/" + to + frag
			}
			for _, e := range v {
				if err := walk(e); err != nil {
					return err
				}
			}
		case []any:
			for _, e := range v {
				if err := walk(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(schema)
}

var openAPIDoc = sync.OnceValues(func() ([]byte, error) {
	paths := map[string]map[string]any{}
	for _, op := range operations() {
		o := map[string]any{"summary": op.summary, "responses": op.responses, "security": []any{map[string]any{"bearer": []string{}}}}
		var params []any
		if strings.Contains(op.path, "{id}") {
			params = append(params, map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, q := range op.query {
			params = append(params, map[string]any{"name": q, "in": "query", "required": false, "schema": map[string]any{"type": "string"}})
		}
		if params != nil {
			o["parameters"] = params
		}
		if op.request != nil {
			schema, ok := op.request.(map[string]any)
			if !ok {
				schema = goSchema(reflect.TypeOf(op.request))
			}
			ct := op.requestType
			if ct == "" {
				ct = "application/json"
			}
			o["requestBody"] = map[string]any{"required": true, "content": map[string]any{ct: map[string]any{"schema": schema}}}
		}
		if paths[op.path] == nil {
			paths[op.path] = map[string]any{}
		}
		paths[op.path][strings.ToLower(op.method)] = o
	}
	schemas := map[string]any{}
	for name, t := range schemaTypes {
		schemas[name] = goSchema(t)
	}
	embedded := map[string]string{jobs.SchemaGenerate: "GeneratePayload", jobs.SchemaSummarize: "SummarizePayload",
		jobs.SchemaResult: "Result", jobs.SchemaProgress: "Progress"}
	for file, name := range embedded {
		raw, err := jobs.Schema(file)
		if err != nil {
			return nil, err
		}
		var schema map[string]any
		if err := json.Unmarshal(raw, &schema); err != nil {
			return nil, fmt.Errorf("schema %s: %w", file, err)
		}
		if err := inDocument(schema, name, embedded); err != nil {
			return nil, fmt.Errorf("schema %s: %w", file, err)
		}
		schemas[name] = schema
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "Red Lite Batch API", "version": "1",
			"description": "Jobs from any language: the native job API, OpenAI-compatible files, batches and chat completions. " +
				"Every job, file and batch belongs to the token that made it; to any other token every route answers 404, as for an id that does not exist. " +
				"A method a path does not have answers 405 with an Allow header. See jobs/README.md and api/README.md."},
		"paths": paths,
		"components": map[string]any{
			"schemas":         schemas,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
		},
	}
	return json.MarshalIndent(doc, "", "  ")
})

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	doc, err := openAPIDoc()
	if err != nil {
		writeError(w, serverError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(doc)
}
