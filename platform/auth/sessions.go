package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/pgstore"
)

// Console sessions. The web console never holds a key in the browser: it
// exchanges the key once for a random session token, sent back as an
// HttpOnly cookie, and every service's Middleware accepts that cookie as an
// alternative to `Authorization: Bearer`. Because a browser attaches the
// cookie by itself, a request authenticated by it that changes something
// must also carry the session's CSRF token in a header, which a page of
// another origin cannot read (the cookie is also SameSite=Strict).

// SessionCookie is the name of the console's session cookie.
const SessionCookie = "ferry_session"

// CSRFHeader carries the CSRF token of the session on mutating requests
// authenticated by the session cookie.
const CSRFHeader = "X-Ferry-CSRF"

// sessionTokenPrefix marks session tokens in secret scanners, as keyPrefix
// does for API keys.
const sessionTokenPrefix = "frs_"

//go:embed sessions/*.sql
var sessionMigrations embed.FS

// SessionMigrations are the console_sessions migrations, a component of
// their own so they never share version numbers with the tenants schema.
var SessionMigrations = pgstore.Register("auth_sessions", sessionMigrations, "sessions")

// ErrCSRF answers a mutating request authenticated by the session cookie
// without the session's CSRF token.
var ErrCSRF = &httpx.Error{Status: http.StatusForbidden, Code: "csrf_token_invalid",
	Message: "a change made with the console's session cookie must carry the session's " + CSRFHeader + " header"}

// ErrNoSession is a session token that is unknown, expired or signed out,
// or whose key was revoked: the caller is not signed in.
var ErrNoSession = errors.New("auth: no such session")

// Session is an open console session.
type Session struct {
	// Token is the cookie value; it is stored only as its hash.
	Token     string
	CSRFToken string
	Principal Principal
	ExpiresAt time.Time
}

// CSRFToken is the CSRF token of a session token. It is derived, not
// stored: only a holder of the token (the server, reading the cookie) can
// compute it, and the console reads it from GET /console/session, which a
// page of another origin cannot.
func CSRFToken(sessionToken string) string {
	h := sha256.Sum256([]byte("ferry-console-csrf\x00" + sessionToken))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// OpenSession stores a new session for p (a tenant key's principal, or the
// admin: then adminKey is the key it signed in with) lasting ttl, and
// deletes a bounded number of long-expired sessions on the way.
func (s *KeyStore) OpenSession(ctx context.Context, p Principal, adminKey string, ttl time.Duration) (Session, error) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	token := sessionTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	expires := s.now().Add(ttl).UTC().Truncate(time.Microsecond)
	var adminHash []byte
	tenant := p.TenantID
	if p.Admin {
		adminHash, tenant = HashKey(adminKey), ""
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE token_hash IN (
		SELECT token_hash FROM console_sessions WHERE expires_at < now() ORDER BY expires_at LIMIT 100)`); err != nil {
		return Session{}, fmt.Errorf("auth: prune sessions: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO console_sessions (token_hash, key_id, tenant_id, admin_key_hash, expires_at)
		VALUES ($1, $2, $3, $4, $5)`, HashKey(token), p.KeyID, tenant, adminHash, expires); err != nil {
		return Session{}, fmt.Errorf("auth: open session: %w", err)
	}
	return Session{Token: token, CSRFToken: CSRFToken(token), Principal: p, ExpiresAt: expires}, nil
}

// CloseSession signs a session out. Other processes stop accepting it
// within the cache TTL.
func (s *KeyStore) CloseSession(ctx context.Context, token string) error {
	hash := HashKey(token)
	if _, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE token_hash = $1`, hash); err != nil {
		return fmt.Errorf("auth: close session: %w", err)
	}
	s.mu.Lock()
	delete(s.cache, sessionCacheKey(hash))
	s.mu.Unlock()
	return nil
}

func sessionCacheKey(hash []byte) string { return "session:" + string(hash) }

// ResolveSession returns the principal of a session token (without the
// tenant an admin session acts for, which the request names) and when the
// session expires. A tenant session ends with its key or tenant; an admin
// session ends when the admin key changes or is removed.
func (s *KeyStore) ResolveSession(ctx context.Context, token, adminKey string) (Principal, time.Time, error) {
	hash := HashKey(token)
	ck := sessionCacheKey(hash)
	now := s.now()
	c, ok := s.cached(ck, now)
	if !ok {
		var err error
		if c, err = s.loadSession(ctx, hash); err != nil {
			return Principal{}, time.Time{}, err
		}
		c.expires = now.Add(s.ttl)
		s.remember(ck, c)
	}
	if !c.found || !now.Before(c.sessionEnds) {
		return Principal{}, time.Time{}, ErrNoSession
	}
	if c.p.Admin && (adminKey == "" || subtle.ConstantTimeCompare(c.adminKeyHash, HashKey(adminKey)) != 1) {
		return Principal{}, time.Time{}, ErrNoSession
	}
	return c.p, c.sessionEnds, nil
}

// loadSession reads a session row, with its key's validity for a tenant
// session.
func (s *KeyStore) loadSession(ctx context.Context, hash []byte) (cachedKey, error) {
	var c cachedKey
	err := s.pool.QueryRow(ctx, `
		SELECT s.key_id, s.tenant_id, s.admin_key_hash, s.expires_at FROM console_sessions s
		WHERE s.token_hash = $1 AND (s.admin_key_hash IS NOT NULL OR EXISTS (
			SELECT 1 FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
			WHERE k.id = s.key_id AND k.tenant_id = s.tenant_id AND k.revoked_at IS NULL AND t.disabled_at IS NULL))`,
		hash).Scan(&c.p.KeyID, &c.p.TenantID, &c.adminKeyHash, &c.sessionEnds)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("auth: lookup session: %w", err)
	}
	c.found, c.p.Admin = true, c.adminKeyHash != nil
	return c, nil
}

// safeMethod reports whether a method only reads (needs no CSRF token).
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sessionPrincipal authenticates r by its session cookie, requiring the
// CSRF token on methods that change something.
func sessionPrincipal(r *http.Request, keys *KeyStore, adminKey string, cookie *http.Cookie) (Principal, error) {
	p, _, err := keys.ResolveSession(r.Context(), cookie.Value, adminKey)
	if errors.Is(err, ErrNoSession) {
		return Principal{}, httpx.ErrUnauthorized
	}
	if err != nil {
		return Principal{}, err
	}
	if !safeMethod(r.Method) && subtle.ConstantTimeCompare([]byte(r.Header.Get(CSRFHeader)), []byte(CSRFToken(cookie.Value))) != 1 {
		return Principal{}, ErrCSRF
	}
	if p.Admin {
		p.TenantID = r.Header.Get(TenantHeader)
	}
	return p, nil
}
