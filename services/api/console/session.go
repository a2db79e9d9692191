package console

import (
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
)

// Errors of the session routes.
var (
	errCrossOrigin = &httpx.Error{Status: http.StatusForbidden, Code: "cross_origin",
		Message: "the console signs in only from its own origin"}
	errNotJSON = &httpx.Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
		Message: "send the key as application/json"}
	errNoKey = &httpx.Error{Status: http.StatusUnprocessableEntity, Code: "validation_failed",
		Message: "key is required", Fields: map[string]string{"key": "required"}}
)

// sessionInfo is what the console learns about its session: who it acts
// as and the CSRF token its changes must carry. Never the key or the token.
type sessionInfo struct {
	TenantID  string    `json:"tenant_id,omitempty"`
	KeyID     string    `json:"key_id"`
	Admin     bool      `json:"admin"`
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// sameOrigin refuses a sign-in posted by a page of another origin (login
// CSRF: signing the victim into the attacker's tenant). Browsers send
// Origin on every cross-origin POST; a request without one is not from a
// browser page.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// handleSignIn exchanges a key for a session cookie.
func (c *Console) handleSignIn(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		httpx.WriteError(w, r, errCrossOrigin)
		return
	}
	// A form of another origin cannot send application/json without a
	// CORS preflight, which this server never grants.
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		httpx.WriteError(w, r, errNotJSON)
		return
	}
	var body struct {
		Key string `json:"key"`
	}
	if err := httpx.DecodeJSON(w, r, 4<<10, &body); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	key := strings.TrimSpace(body.Key)
	if key == "" {
		httpx.WriteError(w, r, errNoKey)
		return
	}
	p, err := auth.ResolveKey(r.Context(), c.keys, c.adminKey, key, "")
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s, err := c.keys.OpenSession(r.Context(), p, c.adminKey, c.cfg.SessionTTL)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	http.SetCookie(w, sessionCookie(r, s.Token, s.ExpiresAt))
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusCreated, infoOf(p, s.CSRFToken, s.ExpiresAt))
}

// handleSession tells the page whether it is signed in, and as whom.
func (c *Console) handleSession(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	cookie, err := r.Cookie(auth.SessionCookie)
	if err != nil || cookie.Value == "" {
		httpx.WriteError(w, r, httpx.ErrUnauthorized)
		return
	}
	p, ends, err := c.keys.ResolveSession(r.Context(), cookie.Value, c.adminKey)
	if err != nil {
		httpx.WriteError(w, r, asUnauthorized(err))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, infoOf(p, auth.CSRFToken(cookie.Value), ends))
}

// handleSignOut ends the session (authenticated, so with its CSRF token)
// and clears the cookie.
func (c *Console) handleSignOut(w http.ResponseWriter, r *http.Request) {
	if cookie, err := r.Cookie(auth.SessionCookie); err == nil && cookie.Value != "" {
		if err := c.keys.CloseSession(r.Context(), cookie.Value); err != nil {
			httpx.WriteError(w, r, err)
			return
		}
	}
	http.SetCookie(w, sessionCookie(r, "", time.Unix(0, 0)))
	w.WriteHeader(http.StatusNoContent)
}

// asUnauthorized answers 401 for a session that does not resolve, and
// passes other (internal) errors on.
func asUnauthorized(err error) error {
	if errors.Is(err, auth.ErrNoSession) {
		return httpx.ErrUnauthorized
	}
	return err
}

func infoOf(p auth.Principal, csrf string, expires time.Time) sessionInfo {
	return sessionInfo{TenantID: p.TenantID, KeyID: p.KeyID, Admin: p.Admin, CSRFToken: csrf, ExpiresAt: expires.UTC()}
}

// sessionCookie is the session cookie: HttpOnly (no script reads it),
// SameSite=Strict (no other site's request carries it), for the whole
// origin (the /v1 APIs read it too), and Secure when the console is served
// over TLS — directly or behind a proxy that says so.
func sessionCookie(r *http.Request, token string, expires time.Time) *http.Cookie {
	c := &http.Cookie{
		Name: auth.SessionCookie, Value: token, Path: "/", Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
	}
	if token == "" {
		c.MaxAge = -1
	}
	return c
}
