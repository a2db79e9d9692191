package signing

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/secretbox"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the schema of the tenants' http signing secrets, known to
// `ferry migrate`.
var Migrations = pgstore.Register("http_signing", migrations, "migrations")

// Migrate creates the table of tenants' http signing secrets. Both its
// writer (the api) and its readers (workers) run it, so neither depends on
// the other having started first.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return Migrations.Apply(ctx, pool)
}

// ErrNoSecret is returned by Meta for a tenant that never created a secret.
var ErrNoSecret = errors.New("signing: the tenant has no http signing secret")

// Meta describes a tenant's secret without revealing it.
type Meta struct {
	CreatedAt time.Time
	RotatedAt time.Time
	// PreviousExpiresAt is when the rotated-out secret stops signing; nil
	// when no previous secret signs any more.
	PreviousExpiresAt *time.Time
}

// Secrets keeps tenants' http signing secrets in Postgres, sealed with box.
//
// The worker reads them at request time, one primary-key read per request,
// rather than being handed them: a secret must never travel in a Kafka
// record (records are retained, replicated and readable by every consumer)
// nor in a payload (kept in the status table and the audit log). It reads
// without a cache on purpose: the read costs a fraction of the HTTP call it
// signs, and a rotation then applies to the very next request of every
// worker, so a receiver that switches to the new secret as soon as the
// rotate call answered never sees a request it cannot verify.
type Secrets struct {
	pool *pgxpool.Pool
	box  *secretbox.Box
}

// NewSecrets returns the store over pool; box seals and opens the secrets.
func NewSecrets(pool *pgxpool.Pool, box *secretbox.Box) *Secrets {
	return &Secrets{pool: pool, box: box}
}

// ad binds a sealed secret to its tenant, so a sealed value copied to
// another tenant's row does not open.
func ad(tenant string) []byte { return []byte("http-signing/" + tenant) }

// Rotate creates the tenant's first secret, or replaces its secret by a
// fresh one while the replaced one keeps signing for grace (any older
// previous secret stops at once). It returns the new secret, shown once.
func (s *Secrets) Rotate(ctx context.Context, tenant string, grace time.Duration, now time.Time) (string, Meta, error) {
	secret := NewSecret()
	var m Meta
	var prevUntil *time.Time
	err := s.pool.QueryRow(ctx, `
		INSERT INTO http_signing_secrets AS h (tenant_id, secret_enc, created_at, rotated_at)
		VALUES ($1, $2, $3, $3)
		ON CONFLICT (tenant_id) DO UPDATE SET
			prev_secret_enc = h.secret_enc, prev_until = $4,
			secret_enc = EXCLUDED.secret_enc, rotated_at = EXCLUDED.rotated_at
		RETURNING created_at, rotated_at, prev_until`,
		tenant, s.box.Seal([]byte(secret), ad(tenant)), now, now.Add(grace)).Scan(&m.CreatedAt, &m.RotatedAt, &prevUntil)
	if err != nil {
		return "", Meta{}, fmt.Errorf("signing: rotate: %w", err)
	}
	m.PreviousExpiresAt = live(prevUntil, now)
	return secret, m, nil
}

// Meta returns the tenant's secret's metadata, or ErrNoSecret.
func (s *Secrets) Meta(ctx context.Context, tenant string, now time.Time) (Meta, error) {
	var m Meta
	var prevUntil *time.Time
	err := s.pool.QueryRow(ctx, `SELECT created_at, rotated_at, prev_until FROM http_signing_secrets WHERE tenant_id = $1`,
		tenant).Scan(&m.CreatedAt, &m.RotatedAt, &prevUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return Meta{}, ErrNoSecret
	}
	if err != nil {
		return Meta{}, fmt.Errorf("signing: read secret metadata: %w", err)
	}
	m.PreviousExpiresAt = live(prevUntil, now)
	return m, nil
}

// Keys returns the HMAC keys that sign the tenant's requests at now: the
// current secret's, then the previous one's while its grace lasts. It
// returns no keys and no error for a tenant without a secret.
func (s *Secrets) Keys(ctx context.Context, tenant string, now time.Time) ([][]byte, error) {
	var cur, prev []byte
	var prevUntil *time.Time
	err := s.pool.QueryRow(ctx, `SELECT secret_enc, prev_secret_enc, prev_until FROM http_signing_secrets WHERE tenant_id = $1`,
		tenant).Scan(&cur, &prev, &prevUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("signing: read the tenant's secret: %w", err)
	}
	sealed := [][]byte{cur}
	if prev != nil && live(prevUntil, now) != nil {
		sealed = append(sealed, prev)
	}
	keys := make([][]byte, 0, len(sealed))
	for _, v := range sealed {
		k, err := s.open(v, tenant)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func (s *Secrets) open(sealed []byte, tenant string) ([]byte, error) {
	plain, err := s.box.Open(sealed, ad(tenant))
	if err != nil {
		return nil, fmt.Errorf("signing: tenant %s's http signing secret: %w", tenant, err)
	}
	return Key(string(plain))
}

// Check opens a few stored secrets, so a process started with a
// FERRY_SECRET_KEY other than the one that sealed them refuses to start
// rather than failing every signed request.
func (s *Secrets) Check(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, secret_enc FROM http_signing_secrets LIMIT 3`)
	if err != nil {
		return fmt.Errorf("signing: check secrets: %w", err)
	}
	type row struct {
		tenant string
		sealed []byte
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.tenant, &x.sealed)
	})
	if err != nil {
		return fmt.Errorf("signing: check secrets: %w", err)
	}
	for _, r := range rs {
		if _, err := s.open(r.sealed, r.tenant); err != nil {
			return fmt.Errorf("FERRY_SECRET_KEY does not decrypt the stored http signing secrets (was it changed?): %w", err)
		}
	}
	return nil
}

// live returns until when it is after now, else nil.
func live(until *time.Time, now time.Time) *time.Time {
	if until == nil || !until.After(now) {
		return nil
	}
	return until
}
