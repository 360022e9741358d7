package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Files live in Redis, not on disk: every API instance behind a load balancer must serve
// every file, and Redis already holds everything else a batch needs and is what operators
// back up. The price is memory: an input file (at most REDLITE_API_MAX_FILE_BYTES) is held
// until deleted, so clients should delete input files once their batch is done.

// File purposes.
const (
	purposeBatch       = "batch"
	purposeBatchOutput = "batch_output"
)

// File is OpenAI's file object.
type File struct {
	ID        string `json:"id"`
	Object    string `json:"object"` // "file"
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"` // "processed"
}

// fileMeta is what Redis keeps beside a file's bytes.
type fileMeta struct {
	File
	Owner string `json:"owner"`
}

func newID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// multipartOverhead is room for the form's other fields and boundaries around the file.
const multipartOverhead = 64 << 10

func (s *Server) postFile(w http.ResponseWriter, r *http.Request) error {
	if r.ContentLength > s.cfg.MaxFileBytes+multipartOverhead {
		return &http.MaxBytesError{Limit: s.cfg.MaxFileBytes}
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
		return badRequest("", "POST /v1/files takes multipart/form-data with the fields purpose and file, got Content-Type %q", clip(r.Header.Get("Content-Type")))
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxFileBytes+multipartOverhead)
	mr, err := r.MultipartReader()
	if err != nil {
		return badRequest("", "multipart body: %v", err)
	}
	var purpose, name string
	var content []byte
	seen := false
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return wrapBodyErr(err, "multipart body")
		}
		switch part.FormName() {
		case "purpose":
			b, err := io.ReadAll(io.LimitReader(part, 64))
			if err != nil {
				return wrapBodyErr(err, "purpose")
			}
			purpose = string(b)
		case "file":
			name = part.FileName()
			content, err = io.ReadAll(io.LimitReader(part, s.cfg.MaxFileBytes+1))
			if err != nil {
				return wrapBodyErr(err, "file")
			}
			if int64(len(content)) > s.cfg.MaxFileBytes {
				return &http.MaxBytesError{Limit: s.cfg.MaxFileBytes}
			}
			seen = true
		default:
			// OpenAI's form has optional fields (expires_after) we have no use for.
		}
		part.Close()
	}
	switch {
	case purpose == "":
		return badRequest("purpose", "purpose is required; only %q is supported", purposeBatch)
	case purpose != purposeBatch:
		return badRequest("purpose", "purpose %q is not supported; only %q", clip(purpose), purposeBatch)
	case !seen:
		return badRequest("file", "file is required")
	case len(content) == 0:
		return badRequest("file", "file is empty")
	}
	if name == "" {
		name = "upload.jsonl"
	}
	f, err := s.storeFile(r.Context(), caller(r), newID("file-"), name, purpose, content, s.cfg.MaxStoredBytes)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, f)
	return nil
}

// wrapBodyErr keeps a body-size error as such (a 413), anything else is the client's 400.
func wrapBodyErr(err error, what string) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	return badRequest("", "%s: %v", what, err)
}

// storeFile books the file's bytes in the token's count (refused past limit, unless limit
// is 0), then writes its bytes and metadata in one transaction. A file written again under
// its id (a batch's output, when a finish is repeated) replaces its count.
func (s *Server) storeFile(ctx context.Context, who, id, name, purpose string, content []byte, limit int64) (File, error) {
	now := time.Now()
	m := fileMeta{File: File{ID: id, Object: "file", Bytes: int64(len(content)), CreatedAt: now.Unix(),
		Filename: name, Purpose: purpose, Status: "processed"}, Owner: who}
	meta, _ := json.Marshal(m)
	if err := s.reserveBytes(ctx, who, id, m.Bytes, limit); err != nil {
		return File{}, err
	}
	err := s.tx(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, keyFileContent(id), content, 0)
		p.Set(ctx, keyFile(id), meta, 0)
		p.ZAdd(ctx, keyFiles(who), redis.Z{Score: float64(now.UnixMicro()), Member: id})
		return nil
	})
	if err != nil {
		// Nothing was written. A batch's output that was there before goes uncounted until
		// the finish, which is repeated until it succeeds, books it again.
		if rerr := s.releaseBytes(context.WithoutCancel(ctx), who, id); rerr != nil {
			s.log.Warn("release the bytes of a file not stored", "file", id, "err", rerr)
		}
		return File{}, serverError(fmt.Errorf("store file %s: %w", id, err))
	}
	return m.File, nil
}

// loadFile reads a file's metadata; another token's file is not found, as with OpenAI.
func (s *Server) loadFile(ctx context.Context, who, id string) (fileMeta, error) {
	b, err := s.rdb.Get(ctx, keyFile(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return fileMeta{}, notFound("file", id)
	}
	if err != nil {
		return fileMeta{}, serverError(fmt.Errorf("read file %s: %w", id, err))
	}
	var m fileMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return fileMeta{}, serverError(fmt.Errorf("file %s: %w", id, err))
	}
	if m.Owner != who {
		return fileMeta{}, notFound("file", id)
	}
	return m, nil
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) error {
	m, err := s.loadFile(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, m.File)
	return nil
}

func (s *Server) getFileContent(w http.ResponseWriter, r *http.Request) error {
	m, err := s.loadFile(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	b, err := s.rdb.Get(r.Context(), keyFileContent(m.ID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return notFound("file", m.ID)
	}
	if err != nil {
		return serverError(fmt.Errorf("read file %s: %w", m.ID, err))
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
	return nil
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) error {
	who := caller(r)
	m, err := s.loadFile(r.Context(), who, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := deleteFileScript.Run(r.Context(), s.rdb, []string{keyFile(m.ID), keyFileContent(m.ID), keyFiles(who),
		keyStoredBytes(who), keyFileBytes(who)}, m.ID).Err(); err != nil {
		return serverError(fmt.Errorf("delete file %s: %w", m.ID, err))
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": m.ID, "object": "file", "deleted": true})
	return nil
}

// deleteFileScript deletes a file (KEYS[1] metadata, KEYS[2] bytes, ARGV[1] in the token's
// list KEYS[3]) and takes it out of the token's count (KEYS[4], KEYS[5]: see
// releaseBytesScript). A script, not a MULTI: at maxmemory Redis refuses every command
// queued in a MULTI, but runs a script whose first write is a deletion, and deleting files
// is how a full Redis gets memory back.
var deleteFileScript = redis.NewScript(`
redis.call("DEL", KEYS[1], KEYS[2])
redis.call("ZREM", KEYS[3], ARGV[1])
local old = redis.call("HGET", KEYS[5], ARGV[1])
if old then
  redis.call("HDEL", KEYS[5], ARGV[1])
  redis.call("DECRBY", KEYS[4], old)
end
return 1`)

// page is OpenAI's cursor list: newest first, "after" an id, at most "limit" entries.
type page[T any] struct {
	Object  string `json:"object"` // "list"
	Data    []T    `json:"data"`
	FirstID string `json:"first_id,omitempty"`
	LastID  string `json:"last_id,omitempty"`
	HasMore bool   `json:"has_more"`
}

// pageIDs reads one page of a sorted set of ids, newest first.
func (s *Server) pageIDs(r *http.Request, key string) (ids []string, more bool, err error) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return nil, false, badRequest("limit", "limit must be between 1 and 100, got %q", clip(v))
		}
		limit = n
	}
	max, skip := "+inf", ""
	if after := q.Get("after"); after != "" {
		score, err := s.rdb.ZScore(r.Context(), key, after).Result()
		if errors.Is(err, redis.Nil) {
			return nil, false, badRequest("after", "after: no object with id %q in this list", clip(after))
		}
		if err != nil {
			return nil, false, serverError(err)
		}
		// From after's own score, then past it: objects created in the same microsecond
		// come in a fixed order (by id) on either side of it.
		max, skip = strconv.FormatFloat(score, 'f', -1, 64), after
	}
	const ties = 16
	ids, err = s.rdb.ZRevRangeByScore(r.Context(), key, &redis.ZRangeBy{Max: max, Min: "-inf", Count: int64(limit + 1 + ties)}).Result()
	if err != nil {
		return nil, false, serverError(err)
	}
	if skip != "" {
		if i := slices.Index(ids, skip); i >= 0 {
			ids = ids[i+1:]
		}
	}
	if len(ids) > limit {
		return ids[:limit], true, nil
	}
	return ids, false, nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	who := caller(r)
	ids, more, err := s.pageIDs(r, keyFiles(who))
	if err != nil {
		return err
	}
	out := page[File]{Object: "list", Data: []File{}, HasMore: more}
	for _, id := range ids {
		m, err := s.loadFile(r.Context(), who, id)
		if err != nil {
			continue // deleted in between
		}
		out.Data = append(out.Data, m.File)
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = out.Data[0].ID, out.Data[n-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
