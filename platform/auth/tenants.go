package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/ttlcache"
)

// RateLimit is a tenant's submission token bucket: PerSecond jobs refill
// per second, up to Burst jobs at once.
type RateLimit struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
}

// Settings are a tenant's limits, kept in tenants.settings. A zero value
// means "no tenant-specific limit": the service's default applies where it
// has one (max_queued, max_queues, max_webhook_endpoints,
// max_payload_bytes), else there is none.
type Settings struct {
	// RateLimit bounds submissions (jobs per second); nil is unlimited.
	RateLimit *RateLimit `json:"rate_limit,omitempty"`
	// MaxQueued bounds the tenant's jobs waiting to run (queued or scheduled).
	MaxQueued int `json:"max_queued,omitempty"`
	// MaxRunning bounds the tenant's jobs running at once (the scheduler
	// enforces it at dispatch).
	MaxRunning int `json:"max_running,omitempty"`
	// MaxPayloadBytes overrides the service's payload size limit.
	MaxPayloadBytes int `json:"max_payload_bytes,omitempty"`
	// MaxQueues bounds the distinct queues in which the tenant has
	// unfinished jobs (the api enforces it at submission).
	MaxQueues int `json:"max_queues,omitempty"`
	// MaxWebhookEndpoints bounds the tenant's webhook endpoints.
	MaxWebhookEndpoints int `json:"max_webhook_endpoints,omitempty"`
	// FlowControl holds the dispatch rate limits and circuit breakers the
	// scheduler applies to the tenant's jobs, by job type.
	FlowControl *FlowControl `json:"flow_control,omitempty"`
}

// FlowControl are a tenant's dispatch flow-control settings
// (docs/flow-control.md), keyed by job type.
type FlowControl struct {
	// RateLimits caps how many jobs of a type start per second (burst at once).
	RateLimits map[string]RateLimit `json:"rate_limits,omitempty"`
	// Breakers configures a circuit breaker per type; "*" guards every
	// type without its own. No entry: no breaker.
	Breakers map[string]Breaker `json:"breakers,omitempty"`
	// KeyRateLimits caps how many jobs carrying a concurrency key start
	// per second, by key (on top of the type's limit, if any).
	KeyRateLimits map[string]RateLimit `json:"key_rate_limits,omitempty"`
}

// Breaker configures a circuit breaker: Failures failures of class
// app_error, retryable or timeout within Window open it for Cooldown.
type Breaker struct {
	Failures int             `json:"failures"`
	Window   schema.Duration `json:"window"`
	Cooldown schema.Duration `json:"cooldown"`
}

// Tenant is a row of the tenants table.
type Tenant struct {
	ID         string
	Name       string
	Weight     int
	Settings   Settings
	CreatedAt  time.Time
	DisabledAt *time.Time
}

// Key is an API key's metadata (never the key nor its hash).
type Key struct {
	ID        string
	TenantID  string
	Prefix    string
	CreatedAt time.Time
	RevokedAt *time.Time
}

// Errors of tenant administration.
var (
	ErrTenantNotFound = errors.New("auth: tenant not found")
	ErrTenantExists   = errors.New("auth: tenant already exists")
	ErrKeyNotFound    = errors.New("auth: key not found")
)

const tenantColumns = `id, name, weight, settings, created_at, disabled_at`

func scanTenant(row pgx.CollectableRow) (Tenant, error) {
	var t Tenant
	var raw []byte
	if err := row.Scan(&t.ID, &t.Name, &t.Weight, &raw, &t.CreatedAt, &t.DisabledAt); err != nil {
		return t, err
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &t.Settings); err != nil {
			return t, fmt.Errorf("auth: tenant %s settings: %w", t.ID, err)
		}
	}
	t.CreatedAt = t.CreatedAt.UTC()
	if t.DisabledAt != nil {
		u := t.DisabledAt.UTC()
		t.DisabledAt = &u
	}
	return t, nil
}

func scanKey(row pgx.CollectableRow) (Key, error) {
	var k Key
	err := row.Scan(&k.ID, &k.TenantID, &k.Prefix, &k.CreatedAt, &k.RevokedAt)
	k.CreatedAt = k.CreatedAt.UTC()
	if k.RevokedAt != nil {
		u := k.RevokedAt.UTC()
		k.RevokedAt = &u
	}
	return k, err
}

// NewTenantID returns an id for a tenant created without one.
func NewTenantID() string { return "tnt_" + strings.ReplaceAll(schema.NewEventID(), "-", "") }

// keyPrefixLen is how much of a key is kept in clear to recognise it.
const keyPrefixLen = 8

// CreateTenant inserts t (CreatedAt and DisabledAt are set by the database)
// with a first API key, returning the tenant, the key's metadata and the
// plain key, which is not stored and cannot be shown again.
func CreateTenant(ctx context.Context, pool *pgxpool.Pool, t Tenant) (Tenant, Key, string, error) {
	settings, err := json.Marshal(t.Settings)
	if err != nil {
		return Tenant{}, Key{}, "", err
	}
	if t.Weight < 1 {
		t.Weight = 1
	}
	var out Tenant
	var key Key
	plain, hash := NewKey()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO tenants (id, name, weight, settings) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO NOTHING RETURNING `+tenantColumns, t.ID, t.Name, t.Weight, settings)
		if err != nil {
			return err
		}
		out, err = pgx.CollectExactlyOneRow(rows, scanTenant)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrTenantExists
		}
		if err != nil {
			return err
		}
		key, err = insertKey(ctx, tx, out.ID, plain, hash)
		return err
	})
	if err != nil {
		return Tenant{}, Key{}, "", fmt.Errorf("auth: create tenant: %w", err)
	}
	return out, key, plain, nil
}

func insertKey(ctx context.Context, tx pgx.Tx, tenant, plain string, hash []byte) (Key, error) {
	rows, err := tx.Query(ctx, `INSERT INTO api_keys (id, tenant_id, key_hash, prefix) VALUES ($1, $2, $3, $4)
		RETURNING id, tenant_id, prefix, created_at, revoked_at`, NewKeyID(), tenant, hash, plain[:min(len(plain), keyPrefixLen)])
	if err != nil {
		return Key{}, err
	}
	return pgx.CollectExactlyOneRow(rows, scanKey)
}

// GetTenant returns tenant id.
func GetTenant(ctx context.Context, pool *pgxpool.Pool, id string) (Tenant, error) {
	rows, err := pool.Query(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1`, id)
	if err != nil {
		return Tenant{}, fmt.Errorf("auth: get tenant: %w", err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, ErrTenantNotFound
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("auth: get tenant: %w", err)
	}
	return t, nil
}

// ListTenants returns up to limit tenants with ids after `after`, by id.
func ListTenants(ctx context.Context, pool *pgxpool.Pool, after string, limit int) ([]Tenant, error) {
	rows, err := pool.Query(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("auth: list tenants: %w", err)
	}
	ts, err := pgx.CollectRows(rows, scanTenant)
	if err != nil {
		return nil, fmt.Errorf("auth: list tenants: %w", err)
	}
	return ts, nil
}

// TenantUpdate changes a tenant; nil fields are left as they are.
type TenantUpdate struct {
	Name     *string
	Weight   *int
	Settings *Settings
	Disabled *bool
}

// UpdateTenant applies u to tenant id and returns the result.
func UpdateTenant(ctx context.Context, pool *pgxpool.Pool, id string, u TenantUpdate) (Tenant, error) {
	var settings []byte
	if u.Settings != nil {
		var err error
		if settings, err = json.Marshal(*u.Settings); err != nil {
			return Tenant{}, err
		}
	}
	rows, err := pool.Query(ctx, `UPDATE tenants SET
			name = COALESCE($2, name),
			weight = COALESCE($3, weight),
			settings = COALESCE($4::jsonb, settings),
			disabled_at = CASE WHEN $5::boolean IS NULL THEN disabled_at
			                   WHEN $5 THEN COALESCE(disabled_at, now()) ELSE NULL END
		WHERE id = $1 RETURNING `+tenantColumns, id, u.Name, u.Weight, settings, u.Disabled)
	if err != nil {
		return Tenant{}, fmt.Errorf("auth: update tenant: %w", err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, ErrTenantNotFound
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("auth: update tenant: %w", err)
	}
	return t, nil
}

// CreateKey issues a new API key for tenant, returning its metadata and the
// plain key (shown once).
func CreateKey(ctx context.Context, pool *pgxpool.Pool, tenant string) (Key, string, error) {
	plain, hash := NewKey()
	var key Key
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		key, err = insertKey(ctx, tx, tenant, plain, hash)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" { // foreign_key_violation
		return Key{}, "", ErrTenantNotFound
	}
	if err != nil {
		return Key{}, "", fmt.Errorf("auth: create key: %w", err)
	}
	return key, plain, nil
}

// ListKeys returns the keys of tenant, newest first, revoked ones included.
func ListKeys(ctx context.Context, pool *pgxpool.Pool, tenant string) ([]Key, error) {
	rows, err := pool.Query(ctx, `SELECT id, tenant_id, prefix, created_at, revoked_at FROM api_keys
		WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC`, tenant)
	if err != nil {
		return nil, fmt.Errorf("auth: list keys: %w", err)
	}
	ks, err := pgx.CollectRows(rows, scanKey)
	if err != nil {
		return nil, fmt.Errorf("auth: list keys: %w", err)
	}
	return ks, nil
}

// RevokeKey revokes key id (revoking a revoked key is a no-op) and returns
// its metadata. Every service stops accepting it within the KeyStore TTL.
func RevokeKey(ctx context.Context, pool *pgxpool.Pool, id string) (Key, error) {
	rows, err := pool.Query(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1
		RETURNING id, tenant_id, prefix, created_at, revoked_at`, id)
	if err != nil {
		return Key{}, fmt.Errorf("auth: revoke key: %w", err)
	}
	k, err := pgx.CollectExactlyOneRow(rows, scanKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, ErrKeyNotFound
	}
	if err != nil {
		return Key{}, fmt.Errorf("auth: revoke key: %w", err)
	}
	return k, nil
}

// TenantCache reads tenants through a short in-memory cache, so a hot path
// (every submission) costs no query while a change made by an admin is seen
// within TTL (ttlcache: refreshed ahead, off the callers' path). A tenant
// without a row reads as the zero Tenant with found=false.
type TenantCache struct {
	cache *ttlcache.Cache[cachedTenant]
}

type cachedTenant struct {
	t     Tenant
	found bool
}

// NewTenantCache returns a cache over pool. ttl defaults to 1s.
func NewTenantCache(pool *pgxpool.Pool, ttl time.Duration) *TenantCache {
	return &TenantCache{cache: ttlcache.New(ttl, func(ctx context.Context, id string) (cachedTenant, error) {
		t, err := GetTenant(ctx, pool, id)
		if errors.Is(err, ErrTenantNotFound) {
			return cachedTenant{}, nil
		}
		return cachedTenant{t: t, found: err == nil}, err
	})}
}

// Get returns tenant id as of at most TTL ago.
func (c *TenantCache) Get(ctx context.Context, id string) (Tenant, bool, error) {
	e, err := c.cache.Get(ctx, id)
	if err != nil {
		return Tenant{}, false, err
	}
	return e.t, e.found, nil
}

// DispatchSettings are what the scheduler applies to a tenant's jobs at
// dispatch: its fair-share weight, max_running and flow control. They are
// read for every tenant at once (the scheduler copies them into Redis), so
// this package, which owns the tenants table and the JSON of its settings,
// is the only code that knows where each one is kept.
type DispatchSettings struct {
	TenantID   string
	Weight     int
	MaxRunning int
	// FlowControl is nil when the tenant has none, or when its stored
	// flow_control could not be read (FlowControlErr says why).
	FlowControl *FlowControl
	// FlowControlErr is why the tenant's flow_control could not be decoded:
	// that tenant then dispatches without flow control, while its weight
	// and max_running, and every other tenant's settings, still apply.
	FlowControlErr error
}

// ListDispatchSettings returns the dispatch settings of every tenant.
func ListDispatchSettings(ctx context.Context, pool *pgxpool.Pool) ([]DispatchSettings, error) {
	rows, err := pool.Query(ctx, `SELECT id, weight, COALESCE((settings->>'max_running')::int, 0), settings->'flow_control' FROM tenants`)
	if err != nil {
		return nil, fmt.Errorf("auth: read tenants' dispatch settings: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanDispatchSettings)
	if err != nil {
		return nil, fmt.Errorf("auth: read tenants' dispatch settings: %w", err)
	}
	return out, nil
}

func scanDispatchSettings(row pgx.CollectableRow) (DispatchSettings, error) {
	var d DispatchSettings
	var raw []byte
	if err := row.Scan(&d.TenantID, &d.Weight, &d.MaxRunning, &raw); err != nil {
		return d, err
	}
	if len(raw) == 0 || string(raw) == "null" {
		return d, nil
	}
	var fc FlowControl
	if err := json.Unmarshal(raw, &fc); err != nil {
		d.FlowControlErr = err
		return d, nil
	}
	d.FlowControl = &fc
	return d, nil
}
