package rulesserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	"github.com/ratekit/ratekit/internal/httpguard"
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
// 400 with its problems (the first config.MaxReportedErrors, then a count of
// the others); errors are {"error": "..."}.
//
// Every request must name an allowed Host (Config.AllowedHosts; on a
// loopback listener, loopback names only), or it gets 403. PUT and DELETE
// pass Config.Authorize first (without it, only clients connecting from
// loopback to loopback may write), before the body is read, and each one is
// audited.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/overrides/{service}/{limiter}", s.authorized("put", s.handlePut))
	mux.HandleFunc("GET /v1/overrides/{service}/{limiter}", s.handleGet)
	mux.HandleFunc("DELETE /v1/overrides/{service}/{limiter}", s.authorized("delete", s.handleDelete))
	mux.HandleFunc("POST /v1/rules", s.handleRules)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !httpguard.HostAllowed(r, s.hosts) {
			msg := "Host " + httpguard.QuotedHost(r) + " is not a name this server answers to (see rulesserver.Config.AllowedHosts)"
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				s.refused(r, "", "", msg)
			}
			writeError(w, http.StatusForbidden, msg)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// authorized runs a write handler for whoever Config.Authorize (or, without
// it, a connection with both ends on loopback) lets write, and audits its outcome.
func (s *Server) authorized(op string, next func(http.ResponseWriter, *http.Request) (*rulesv1.OverrideDocument, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var who string
		switch {
		case s.authorize != nil:
			var ok bool
			if who, ok = s.authorize(r); !ok {
				s.refused(r, op, who, "not authorized")
				writeError(w, http.StatusForbidden, "not authorized to change override documents")
				return
			}
		case httpguard.RemoteLoopback(r) && httpguard.LocalLoopback(r):
			// Both ends: a connection from a loopback source to another
			// address of the host is forwarded, not local (a mesh sidecar
			// sends every client's request from 127.0.0.6 to the pod's IP).
			who = "loopback"
		default:
			msg := "writes need an authorization hook (rulesserver.Config.Authorize; ratekit-rules serve -write-token-file) unless the client connects from loopback to a loopback address"
			s.refused(r, op, "", msg)
			writeError(w, http.StatusForbidden, msg)
			return
		}
		doc, err := next(w, r)
		service, limiter := clip(r.PathValue("service")), clip(r.PathValue("limiter"))
		// Where it wrote, as the CLI's and the admin page's records say: a
		// server on another -key-prefix writes where no service reads.
		attrs := []slog.Attr{slog.String("who", who), slog.String("op", op),
			slog.String("service", service), slog.String("limiter", limiter), slog.String("key", s.key(service, limiter)),
			slog.String("outcome", outcome(err)), slog.String("if_match", clip(unquote(r.Header.Get("If-Match")))),
			slog.String("remote_addr", r.RemoteAddr)}
		if doc != nil {
			// What was written, in a few numbers: the document itself may
			// be 1 MiB.
			rules := len(doc.GetDefaultRules().GetRules())
			for _, o := range doc.GetOverrides() {
				rules += len(o.GetRules().GetRules())
			}
			attrs = append(attrs, slog.String("revision", doc.GetRevision()),
				slog.Int("overrides", len(doc.GetOverrides())), slog.Int("rules", rules))
		}
		level := slog.LevelInfo
		if err != nil {
			// At WARN, as the admin page and the CLI log a failed write.
			level = slog.LevelWarn
			attrs = append(attrs, slog.String("error", err.Error()))
		}
		s.logger.LogAttrs(r.Context(), level, "rate_limit_rules_write", attrs...)
	}
}

// refused logs a management request turned away.
func (s *Server) refused(r *http.Request, op, who, why string) {
	s.logger.LogAttrs(r.Context(), slog.LevelWarn, "rate_limit_rules_refused", slog.String("who", who),
		slog.String("op", op), slog.String("method", r.Method), slog.String("path", clip(r.URL.Path)),
		slog.String("host", clip(r.Host)), slog.String("reason", why), slog.String("remote_addr", r.RemoteAddr))
}

// maxQuoted bounds what a log record or a refusal repeats of a value the
// client chose (a Host, a path, a name in it): those are the client's, up
// to the server's 64 KiB of headers, and a record should not grow with them.
// A valid name (64 bytes at most) is repeated whole.
const maxQuoted = 80

// clip is s cut to its first maxQuoted bytes, for a log attribute or a
// message.
func clip(s string) string { return cut(s, maxQuoted) }

// maxDecodeError bounds what an answer or a log record repeats of the JSON
// decoder's error about a body: it quotes what it could not read (an
// unknown field's name, a bad value) whole, up to the body's 1 MiB.
const maxDecodeError = 256

// decodeError is the message of the JSON decoder's err, cut to
// maxDecodeError bytes.
func decodeError(err error) string { return cut(err.Error(), maxDecodeError) }

// cut is s cut to its first n bytes, "..." marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

var jsonOut = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false}

func (s *Server) handlePut(w http.ResponseWriter, r *http.Request) (*rulesv1.OverrideDocument, error) {
	body, err := readBody(w, r)
	if err != nil {
		return nil, err
	}
	doc := &rulesv1.OverrideDocument{}
	if err := protojson.Unmarshal(body, doc); err != nil {
		msg := "decode override document: " + decodeError(err)
		writeError(w, http.StatusBadRequest, msg)
		return nil, errors.New(msg)
	}
	service, limiter := r.PathValue("service"), r.PathValue("limiter")
	if doc.Service == "" {
		doc.Service = service
	}
	if doc.Limiter == "" {
		doc.Limiter = limiter
	}
	if doc.Service != service || doc.Limiter != limiter {
		msg := "the document names " + clip(doc.Service) + "/" + clip(doc.Limiter) + ", the path " + clip(service) + "/" + clip(limiter)
		writeError(w, http.StatusBadRequest, msg)
		return nil, errors.New(msg)
	}
	if m := r.Header.Get("If-Match"); m != "" {
		doc.Revision = unquote(m)
	}
	out, err := s.Put(r.Context(), doc)
	if err != nil {
		writeError(w, statusOf(err), err.Error())
		return nil, err
	}
	writeDoc(w, out)
	return out, nil
}

// readBody reads a request body of at most MaxDocumentBytes, answering the
// error itself: 413 over the bound, 400 for a body that failed (a client
// cut off by the server's read timeout, for one).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxDocumentBytes))
	if err != nil {
		code := http.StatusBadRequest
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			code = http.StatusRequestEntityTooLarge
		}
		writeError(w, code, "read body: "+err.Error())
		return nil, fmt.Errorf("read body: %w", err)
	}
	return body, nil
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	doc, err := s.Get(r.Context(), r.PathValue("service"), r.PathValue("limiter"))
	if err != nil {
		writeError(w, statusOf(err), err.Error())
		return
	}
	writeDoc(w, doc)
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) (*rulesv1.OverrideDocument, error) {
	if err := s.Delete(r.Context(), r.PathValue("service"), r.PathValue("limiter"), unquote(r.Header.Get("If-Match"))); err != nil {
		writeError(w, statusOf(err), err.Error())
		return nil, err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil, nil
}

// handleRules answers a GetRulesRequest (protojson) as GetRules does, for
// operators and scripts asking which rules a request would get.
func (s *Server) handleRules(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		return
	}
	req := &rulesv1.GetRulesRequest{}
	if err := protojson.Unmarshal(body, req); err != nil {
		writeError(w, http.StatusBadRequest, "decode GetRulesRequest: "+decodeError(err))
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
