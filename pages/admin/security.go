package admin

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/ratekit/ratekit/internal/httpguard"
)

// csrfCookie holds the per-browser token that every form carries back
// (double submit). SameSite=Strict keeps the browser from sending it with a
// request another site starts, and the origin check refuses such requests
// even from a browser that ignores SameSite.
const csrfCookie = "ratekit_admin_csrf"

// csrfToken returns the browser's token, setting a new cookie when it has
// none (or a malformed one).
func csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && validToken(c.Value) {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	tok := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return tok
}

func validToken(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == 32
}

// checkCSRF refuses a state-changing request that another site could have
// made: it must come from this page's origin (Origin, or Sec-Fetch-Site when
// a browser sends no Origin), and its form must carry the cookie's token.
// A refusal quotes the headers it names at most 80 characters long: they
// are the client's, whatever their length, and the refusal is both an
// answer and an audit line.
func checkCSRF(r *http.Request) error {
	switch origin, site := r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site"); {
	case origin != "":
		u, err := url.Parse(origin)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("Refused: the form was sent from another site (Origin %.80q is not %s).", origin, httpguard.QuotedHost(r))
		}
	case site != "":
		if site != "same-origin" {
			return fmt.Errorf("Refused: the form was sent from another site (Sec-Fetch-Site: %.80q).", site)
		}
	default:
		return errors.New("Refused: the request does not say where it comes from (no Origin header); send the form from this page.")
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || !validToken(c.Value) {
		return errors.New("Refused: the form's security cookie is missing; reload the page and send the form again.")
	}
	if subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostForm.Get("csrf"))) != 1 {
		return errors.New("Refused: the form's security token does not match; reload the page and send the form again.")
	}
	return nil
}

// setHeaders sets the headers of every answer: nothing cached, no framing,
// no content sniffing, and a Content-Security-Policy that allows the page's
// own stylesheet (by hash) and form posts to itself, and nothing else: no
// script at all.
func setHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", contentSecurityPolicy)
}
