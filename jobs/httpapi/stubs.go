package httpapi

import "net/http"

func notYet(http.ResponseWriter, *http.Request) error {
	return &apiError{status: http.StatusNotImplemented, typ: typeServer, code: "not_implemented", msg: "not implemented yet"}
}

func serveOpenAPI(w http.ResponseWriter, r *http.Request) { writeError(w, notYet(w, r)) }
