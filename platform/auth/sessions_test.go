package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/auth"
)

// sessionCall sends method to a handler behind auth.Middleware with the
// session cookie token and csrf header (when not empty), answering the
// status and the principal the handler saw.
func sessionCall(t *testing.T, mw func(http.Handler) http.Handler, method, token, csrf string, headers ...string) (int, auth.Principal) {
	t.Helper()
	var seen auth.Principal
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = auth.FromContext(r.Context())
		w.WriteHeader(http.StatusNoContent)
	}))
	r := httptest.NewRequest(method, "/v1/jobs", nil)
	r.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: token})
	if csrf != "" {
		r.Header.Set(auth.CSRFHeader, csrf)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, seen
}

// TestConsoleSessions: a session cookie authenticates like its key; a
// change needs the session's CSRF token; signing out, revoking the key or
// changing the admin key ends the session; only the token's hash is stored.
func TestConsoleSessions(t *testing.T) {
	ctx := context.Background()
	pool := openAuthDB(t)
	_, key, plain, err := auth.CreateTenant(ctx, pool, auth.Tenant{ID: "acme", Name: "Acme"})
	if err != nil {
		t.Fatal(err)
	}
	ks := auth.NewKeyStore(pool, time.Millisecond)
	mw := auth.Middleware(ks, "admin-secret")

	p, err := auth.ResolveKey(ctx, ks, "admin-secret", plain, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ks.OpenSession(ctx, p, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var stored int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE token_hash = $1`, auth.HashKey(s.Token)).Scan(&stored); err != nil || stored != 1 {
		t.Fatalf("session row by hash: %d %v", stored, err)
	}
	if code, got := sessionCall(t, mw, "GET", s.Token, ""); code != http.StatusNoContent || got.TenantID != "acme" || got.KeyID != key.ID {
		t.Fatalf("GET with session: %d %+v", code, got)
	}
	if code, _ := sessionCall(t, mw, "POST", s.Token, ""); code != http.StatusForbidden {
		t.Fatalf("POST without CSRF token: %d, want 403", code)
	}
	if code, _ := sessionCall(t, mw, "POST", s.Token, auth.CSRFToken("frs_other")); code != http.StatusForbidden {
		t.Fatalf("POST with another session's CSRF token: %d, want 403", code)
	}
	if code, _ := sessionCall(t, mw, "DELETE", s.Token, s.CSRFToken); code != http.StatusNoContent {
		t.Fatalf("DELETE with CSRF token: %d", code)
	}
	if code, _ := sessionCall(t, mw, "GET", "frs_guessed", ""); code != http.StatusUnauthorized {
		t.Fatalf("unknown session: %d", code)
	}

	if err := ks.CloseSession(ctx, s.Token); err != nil {
		t.Fatal(err)
	}
	if code, _ := sessionCall(t, mw, "GET", s.Token, ""); code != http.StatusUnauthorized {
		t.Fatalf("signed-out session: %d", code)
	}

	s2, err := ks.OpenSession(ctx, p, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.RevokeKey(ctx, pool, key.ID); err != nil {
		t.Fatal(err)
	}
	waitUnauthorized(t, mw, s2.Token, "session of a revoked key")

	expired, err := ks.OpenSession(ctx, auth.Principal{TenantID: "acme", KeyID: key.ID}, "", -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := sessionCall(t, mw, "GET", expired.Token, ""); code != http.StatusUnauthorized {
		t.Fatalf("expired session: %d", code)
	}

	admin, err := auth.ResolveKey(ctx, ks, "admin-secret", "admin-secret", "")
	if err != nil || !admin.Admin {
		t.Fatalf("admin key: %+v %v", admin, err)
	}
	as, err := ks.OpenSession(ctx, admin, "admin-secret", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if code, got := sessionCall(t, mw, "GET", as.Token, "", auth.TenantHeader, "acme"); code != http.StatusNoContent || !got.Admin || got.TenantID != "acme" {
		t.Fatalf("admin session acting for acme: %d %+v", code, got)
	}
	waitUnauthorized(t, auth.Middleware(ks, "rotated-admin-secret"), as.Token, "admin session after the admin key changed")
}

// waitUnauthorized waits (past the key cache's TTL) until token no longer
// authenticates.
func waitUnauthorized(t *testing.T, mw func(http.Handler) http.Handler, token, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := sessionCall(t, mw, "GET", token, "")
		if code == http.StatusUnauthorized {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still answers %d", what, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
