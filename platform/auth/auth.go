// Package auth is the one authentication layer of every Ferry service:
// `Authorization: Bearer <key>` resolves to a tenant (API key) or to the
// operator (admin key). Keys are random, shown once and stored as SHA-256
// hashes; lookups go to the shared tenants/api_keys tables through a short
// cache, so a new or revoked key takes effect everywhere within seconds.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/ttlcache"

	"embed"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the auth schema migrations; `ferry migrate` applies them.
var Migrations = pgstore.Register("auth", migrations, "migrations")

// Migrate creates the tenants, api_keys and console_sessions tables.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := Migrations.Apply(ctx, pool); err != nil {
		return err
	}
	return SessionMigrations.Apply(ctx, pool)
}

// Principal is who is calling.
type Principal struct {
	// TenantID is the tenant the call acts for. An admin may act for a
	// tenant by sending the Ferry-Tenant header.
	TenantID string
	// KeyID identifies the API key (never the key itself); it is the actor
	// recorded in events and audit rows. "admin" for the admin key.
	KeyID string
	Admin bool
}

type ctxKey struct{}

// FromContext returns the caller set by Middleware.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// WithPrincipal returns ctx carrying p (for tests and internal calls).
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// keyPrefix marks Ferry API keys so they are recognisable in secret scanners.
const keyPrefix = "fry_"

// NewKey returns a fresh random API key and its hash.
func NewKey() (plain string, hash []byte) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	plain = keyPrefix + base64.RawURLEncoding.EncodeToString(b)
	return plain, HashKey(plain)
}

// HashKey is how keys are stored: SHA-256. Keys carry 256 random bits, so a
// plain hash is safe (no password stretching needed) and allows an indexed
// lookup.
func HashKey(plain string) []byte {
	h := sha256.Sum256([]byte(plain))
	return h[:]
}

// KeyStore resolves key hashes through the api_keys table with a short
// cache. Entries live for TTL, so revocation is seen within TTL. API keys
// are cached in a ttlcache (refreshed ahead, so a busy key never waits for
// Postgres); console sessions in cache.
type KeyStore struct {
	pool *pgxpool.Pool
	ttl  time.Duration
	now  func() time.Time
	keys *ttlcache.Cache[cachedKey]

	mu    sync.Mutex
	cache map[string]cachedKey
}

type cachedKey struct {
	p       Principal
	found   bool
	expires time.Time
	// Of console sessions: when the session ends, and the hash of the
	// admin key an admin session was opened with.
	sessionEnds  time.Time
	adminKeyHash []byte
}

// NewKeyStore returns a store over pool. ttl defaults to 2s.
func NewKeyStore(pool *pgxpool.Pool, ttl time.Duration) *KeyStore {
	if ttl <= 0 {
		ttl = 2 * time.Second
	}
	s := &KeyStore{pool: pool, ttl: ttl, now: time.Now, cache: map[string]cachedKey{}}
	s.keys = ttlcache.New(ttl, s.loadKey)
	return s
}

// ErrUnknownKey is returned for keys that do not exist, are revoked, or
// belong to a disabled tenant.
var ErrUnknownKey = errors.New("auth: unknown or revoked key")

// Resolve returns the principal of a plain key.
func (s *KeyStore) Resolve(ctx context.Context, plain string) (Principal, error) {
	c, err := s.keys.Get(ctx, string(HashKey(plain)))
	if err != nil {
		return Principal{}, err
	}
	if !c.found {
		return Principal{}, ErrUnknownKey
	}
	return c.p, nil
}

// loadKey reads the key of a hash: found=false for a key that does not
// exist, is revoked or belongs to a disabled tenant (cached too, so a flood
// of invalid keys costs one query per key and TTL).
func (s *KeyStore) loadKey(ctx context.Context, hash string) (cachedKey, error) {
	var p Principal
	err := s.pool.QueryRow(ctx, `
		SELECT k.id, k.tenant_id FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
		WHERE k.key_hash = $1 AND k.revoked_at IS NULL AND t.disabled_at IS NULL`, []byte(hash)).Scan(&p.KeyID, &p.TenantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return cachedKey{}, nil
	}
	if err != nil {
		return cachedKey{}, fmt.Errorf("auth: lookup key: %w", err)
	}
	return cachedKey{p: p, found: true}, nil
}

// cached returns the cache entry of k if it is still fresh at now.
func (s *KeyStore) cached(k string, now time.Time) (cachedKey, bool) {
	s.mu.Lock()
	c, ok := s.cache[k]
	s.mu.Unlock()
	return c, ok && now.Before(c.expires)
}

// remember caches c under k, bounding the cache against key-guessing
// floods.
func (s *KeyStore) remember(k string, c cachedKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cache) > 100_000 {
		s.cache = map[string]cachedKey{}
	}
	s.cache[k] = c
}

// TenantHeader lets the admin key act for one tenant.
const TenantHeader = "Ferry-Tenant"

// Middleware authenticates every request: by `Authorization: Bearer` (an
// API key or the admin key) or, without that header, by the console's
// session cookie (see sessions.go). The admin key is compared in constant
// time; an empty admin key disables admin access.
func Middleware(keys *KeyStore, adminKey string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := authenticate(r, keys, adminKey)
			if err != nil {
				httpx.WriteError(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
		})
	}
}

// authenticate returns the caller of r, or the error to answer.
func authenticate(r *http.Request, keys *KeyStore, adminKey string) (Principal, error) {
	if r.Header.Get("Authorization") == "" {
		if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
			return sessionPrincipal(r, keys, adminKey, c)
		}
	}
	plain, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	plain = strings.TrimSpace(plain)
	if !ok || plain == "" {
		return Principal{}, httpx.ErrUnauthorized
	}
	return ResolveKey(r.Context(), keys, adminKey, plain, r.Header.Get(TenantHeader))
}

// ResolveKey returns the principal of a plain API key or of the admin key
// (acting for tenant, which may be empty). Unknown keys are
// httpx.ErrUnauthorized.
func ResolveKey(ctx context.Context, keys *KeyStore, adminKey, plain, tenant string) (Principal, error) {
	if adminKey != "" && subtle.ConstantTimeCompare([]byte(plain), []byte(adminKey)) == 1 {
		return Principal{Admin: true, KeyID: "admin", TenantID: tenant}, nil
	}
	p, err := keys.Resolve(ctx, plain)
	if errors.Is(err, ErrUnknownKey) {
		return Principal{}, httpx.ErrUnauthorized
	}
	return p, err
}

// RequireTenant rejects callers that do not act for a tenant (an admin
// without the Ferry-Tenant header).
func RequireTenant(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, _ := FromContext(r.Context()); p.TenantID == "" {
			httpx.WriteError(w, r, httpx.Errorf(http.StatusBadRequest, "tenant_required",
				"the admin key must name a tenant with the %s header on this route", TenantHeader))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// RequireAdmin rejects callers other than the operator.
func RequireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, _ := FromContext(r.Context()); !p.Admin {
			httpx.WriteError(w, r, httpx.ErrForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// EnsureTenant creates tenant id if missing and registers plainKey for it if
// that key is not known yet. `ferry dev` uses it to bootstrap the default
// tenant with a stable key.
func EnsureTenant(ctx context.Context, pool *pgxpool.Pool, id, name, plainKey string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tenants (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, id, name); err != nil {
			return err
		}
		hash := HashKey(plainKey)
		_, err := tx.Exec(ctx, `INSERT INTO api_keys (id, tenant_id, key_hash, prefix) VALUES ($1, $2, $3, $4)
			ON CONFLICT (key_hash) DO NOTHING`, NewKeyID(), id, hash, plainKey[:min(len(plainKey), 8)])
		return err
	})
}

// NewKeyID returns an id for an API key row.
func NewKeyID() string { return "key_" + strings.ReplaceAll(schema.NewEventID(), "-", "") }
