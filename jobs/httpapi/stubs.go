package httpapi

import "net/http"

func notYet(http.ResponseWriter, *http.Request) error {
	return &apiError{status: http.StatusNotImplemented, typ: typeServer, code: "not_implemented", msg: "not implemented yet"}
}

func (s *Server) postFile(w http.ResponseWriter, r *http.Request) error       { return notYet(w, r) }
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error      { return notYet(w, r) }
func (s *Server) getFile(w http.ResponseWriter, r *http.Request) error        { return notYet(w, r) }
func (s *Server) getFileContent(w http.ResponseWriter, r *http.Request) error { return notYet(w, r) }
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) error     { return notYet(w, r) }
func (s *Server) postBatch(w http.ResponseWriter, r *http.Request) error      { return notYet(w, r) }
func (s *Server) listBatches(w http.ResponseWriter, r *http.Request) error    { return notYet(w, r) }
func (s *Server) getBatch(w http.ResponseWriter, r *http.Request) error       { return notYet(w, r) }
func (s *Server) cancelBatch(w http.ResponseWriter, r *http.Request) error    { return notYet(w, r) }
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) error {
	return notYet(w, r)
}
func serveOpenAPI(w http.ResponseWriter, r *http.Request) { writeError(w, notYet(w, r)) }

type batchRunner struct{}

func newBatchRunner(*Server) *batchRunner { return &batchRunner{} }
func (*batchRunner) start()               {}
func (*batchRunner) terminate()           {}
