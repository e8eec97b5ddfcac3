package rulesserver

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratekit/ratekit/core/config"
	"github.com/ratekit/ratekit/core/remoterules/rulesv1"
)

// Handler is the management API, JSON over HTTP (protojson of
// OverrideDocument, proto field names), the shape a Terraform REST provider
// or a CI job drives:
//
//	PUT    /v1/overrides/{service}/{limiter}  store the document whole (idempotent)
//	GET    /v1/overrides/{service}/{limiter}  read it (ETag: its revision)
//	DELETE /v1/overrides/{service}/{limiter}  delete it (404 when there is none)
//	POST   /v1/rules                          GetRules over HTTP: which rules would this request get?
//
// PUT and DELETE honour If-Match (or, for PUT, the body's revision): a
// revision other than the stored one answers 409. An invalid document answers
// 400 with every problem; errors are {"error": "..."}.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/overrides/{service}/{limiter}", s.handlePut)
	mux.HandleFunc("GET /v1/overrides/{service}/{limiter}", s.handleGet)
	mux.HandleFunc("DELETE /v1/overrides/{service}/{limiter}", s.handleDelete)
	mux.HandleFunc("POST /v1/rules", s.handleRules)
	return mux
}

var jsonOut = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false}

func (s *Server) handlePut(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxDocumentBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "read body: "+err.Error())
		return
	}
	doc := &rulesv1.OverrideDocument{}
	if err := protojson.Unmarshal(body, doc); err != nil {
		writeError(w, http.StatusBadRequest, "decode override document: "+err.Error())
		return
	}
	service, limiter := r.PathValue("service"), r.PathValue("limiter")
	if doc.Service == "" {
		doc.Service = service
	}
	if doc.Limiter == "" {
		doc.Limiter = limiter
	}
	if doc.Service != service || doc.Limiter != limiter {
		writeError(w, http.StatusBadRequest, "the document names "+doc.Service+"/"+doc.Limiter+", the path "+service+"/"+limiter)
		return
	}
	if m := r.Header.Get("If-Match"); m != "" {
		doc.Revision = unquote(m)
	}
	out, err := s.Put(r.Context(), doc)
	if err != nil {
		writeError(w, statusOf(err), err.Error())
		return
	}
	writeDoc(w, out)
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	doc, err := s.Get(r.Context(), r.PathValue("service"), r.PathValue("limiter"))
	if err != nil {
		writeError(w, statusOf(err), err.Error())
		return
	}
	writeDoc(w, doc)
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	if err := s.Delete(r.Context(), r.PathValue("service"), r.PathValue("limiter"), unquote(r.Header.Get("If-Match"))); err != nil {
		writeError(w, statusOf(err), err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleRules answers a GetRulesRequest (protojson) as GetRules does, for
// operators and scripts asking which rules a request would get.
func (s *Server) handleRules(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxDocumentBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "read body: "+err.Error())
		return
	}
	req := &rulesv1.GetRulesRequest{}
	if err := protojson.Unmarshal(body, req); err != nil {
		writeError(w, http.StatusBadRequest, "decode GetRulesRequest: "+err.Error())
		return
	}
	resp, err := s.GetRules(r.Context(), req)
	if err != nil {
		code := http.StatusServiceUnavailable
		if status.Code(err) == codes.InvalidArgument {
			code = http.StatusBadRequest
		}
		writeError(w, code, status.Convert(err).Message())
		return
	}
	b, err := jsonOut.Marshal(resp)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func statusOf(err error) int {
	var ve *config.ValidationError
	var pe *protovalidate.ValidationError
	switch {
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.As(err, &ve), errors.As(err, &pe):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

func unquote(etag string) string {
	if n := len(etag); n >= 2 && etag[0] == '"' && etag[n-1] == '"' {
		return etag[1 : n-1]
	}
	return etag
}

func writeDoc(w http.ResponseWriter, doc *rulesv1.OverrideDocument) {
	b, err := jsonOut.Marshal(doc)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", `"`+doc.GetRevision()+`"`)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
