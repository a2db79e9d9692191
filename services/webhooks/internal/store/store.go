// Package store is the webhooks service's Postgres adapter: endpoints, the
// delivery outbox and the attempt log. Every tenant-facing query is scoped
// by tenant.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/platform/pgstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the webhooks schema migrations; `ferry migrate` applies them.
var Migrations = pgstore.Register("webhooks", migrations, "migrations")

// Migrate creates the service's tables.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return Migrations.Apply(ctx, pool)
}

// ErrNotFound is returned for an endpoint that does not exist, is deleted
// or belongs to another tenant.
var ErrNotFound = errors.New("store: not found")

// Delivery statuses.
const (
	StatusPending   = "pending"
	StatusDelivered = "delivered"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// Endpoint is a stored endpoint; secrets stay sealed.
type Endpoint struct {
	ID             string
	TenantID       string
	URL            string
	EventTypes     []string
	FilterQueue    string
	FilterType     string
	Description    string
	SecretEnc      []byte
	PrevSecretEnc  []byte
	PrevUntil      *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	DisabledAt     *time.Time
	DisabledReason string
}

const endpointCols = `id, tenant_id, url, event_types, filter_queue, filter_type, description,
	secret_enc, prev_secret_enc, prev_secret_until, created_at, updated_at, disabled_at, disabled_reason`

func scanEndpoint(row pgx.Row) (Endpoint, error) {
	var e Endpoint
	err := row.Scan(&e.ID, &e.TenantID, &e.URL, &e.EventTypes, &e.FilterQueue, &e.FilterType, &e.Description,
		&e.SecretEnc, &e.PrevSecretEnc, &e.PrevUntil, &e.CreatedAt, &e.UpdatedAt, &e.DisabledAt, &e.DisabledReason)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, ErrNotFound
	}
	return e, err
}

// Store runs the queries.
type Store struct{ pool *pgxpool.Pool }

// New returns a Store over pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// CreateEndpoint inserts e and returns it as stored.
func (s *Store) CreateEndpoint(ctx context.Context, e Endpoint) (Endpoint, error) {
	if e.EventTypes == nil {
		e.EventTypes = []string{}
	}
	return scanEndpoint(s.pool.QueryRow(ctx, `
		INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, filter_queue, filter_type, description, secret_enc)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+endpointCols,
		e.ID, e.TenantID, e.URL, e.EventTypes, e.FilterQueue, e.FilterType, e.Description, e.SecretEnc))
}

// Endpoint returns one endpoint of tenant.
func (s *Store) Endpoint(ctx context.Context, tenant, id string) (Endpoint, error) {
	return scanEndpoint(s.pool.QueryRow(ctx, `SELECT `+endpointCols+` FROM webhook_endpoints
		WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL`, tenant, id))
}

// Endpoints lists tenant's endpoints in creation order after cursor (an id).
func (s *Store) Endpoints(ctx context.Context, tenant, cursor string, limit int) ([]Endpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+endpointCols+` FROM webhook_endpoints
		WHERE tenant_id = $1 AND deleted_at IS NULL AND id > $2 ORDER BY id LIMIT $3`, tenant, cursor, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Endpoint, error) { return scanEndpoint(r) })
}

// DeleteEndpoint soft-deletes an endpoint (its delivery log stays readable
// to operators) and cancels its pending deliveries.
func (s *Store) DeleteEndpoint(ctx context.Context, tenant, id string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET deleted_at = now(), updated_at = now()
			WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL`, tenant, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return cancelPending(ctx, tx, id, "endpoint deleted")
	})
}

func cancelPending(ctx context.Context, tx pgx.Tx, endpointID, reason string) error {
	_, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET status = 'cancelled', next_attempt_at = NULL,
		last_error = CASE WHEN last_error = '' THEN $2 ELSE last_error || '; ' || $2 END, updated_at = now()
		WHERE endpoint_id = $1 AND status = 'pending'`, endpointID, reason)
	return err
}

// RotateSecret makes newEnc the endpoint's secret and keeps the current one
// signing until prevUntil.
func (s *Store) RotateSecret(ctx context.Context, tenant, id string, newEnc []byte, prevUntil time.Time) (Endpoint, error) {
	return scanEndpoint(s.pool.QueryRow(ctx, `
		UPDATE webhook_endpoints SET prev_secret_enc = secret_enc, prev_secret_until = $3, secret_enc = $4, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL RETURNING `+endpointCols, tenant, id, prevUntil, newEnc))
}

// EnableEndpoint re-enables a disabled endpoint and resets its health.
// Deliveries cancelled while it was disabled stay cancelled.
func (s *Store) EnableEndpoint(ctx context.Context, tenant, id string) (Endpoint, error) {
	return scanEndpoint(s.pool.QueryRow(ctx, `
		UPDATE webhook_endpoints SET disabled_at = NULL, disabled_reason = '', failing_since = NULL,
			consecutive_failures = 0, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL RETURNING `+endpointCols, tenant, id))
}

// Active is an endpoint that receives deliveries, as the fan-out matches it.
type Active struct {
	ID, TenantID           string
	EventTypes             []string
	FilterQueue, FilterTyp string
}

// EndpointVersion returns the endpoint change counter, bumped in the same
// transaction as every change to which endpoints receive what.
func EndpointVersion(ctx context.Context, q pgstore.Querier) (version int64, err error) {
	err = q.QueryRow(ctx, `SELECT version FROM webhook_endpoint_version`).Scan(&version)
	return version, err
}

// ActiveEndpoints returns every endpoint that is neither deleted nor
// disabled and the change counter they are current as of (one statement,
// so one snapshot).
func (s *Store) ActiveEndpoints(ctx context.Context) (version int64, active []Active, err error) {
	return ActiveEndpoints(ctx, s.pool)
}

// ActiveEndpoints is Store.ActiveEndpoints over q (e.g. a transaction).
func ActiveEndpoints(ctx context.Context, q pgstore.Querier) (version int64, active []Active, err error) {
	rows, err := q.Query(ctx, `SELECT v.version, e.id, e.tenant_id, e.event_types, e.filter_queue, e.filter_type
		FROM webhook_endpoint_version v
		LEFT JOIN webhook_endpoints e ON e.deleted_at IS NULL AND e.disabled_at IS NULL ORDER BY e.id`)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, tenant, queue, typ *string
		var types []string
		if err := rows.Scan(&version, &id, &tenant, &types, &queue, &typ); err != nil {
			return 0, nil, err
		}
		if id != nil {
			active = append(active, Active{ID: *id, TenantID: *tenant, EventTypes: types, FilterQueue: *queue, FilterTyp: *typ})
		}
	}
	return version, active, rows.Err()
}

// SealedSecrets returns up to n sealed secrets with their endpoint ids, to
// check at start-up that the configured key opens them.
func (s *Store) SealedSecrets(ctx context.Context, n int) (ids []string, sealed [][]byte, err error) {
	rows, err := s.pool.Query(ctx, `SELECT id, secret_enc FROM webhook_endpoints WHERE deleted_at IS NULL ORDER BY created_at DESC LIMIT $1`, n)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var b []byte
		if err := rows.Scan(&id, &b); err != nil {
			return nil, nil, err
		}
		ids, sealed = append(ids, id), append(sealed, b)
	}
	return ids, sealed, rows.Err()
}

// NewDelivery is one outbox row to insert.
type NewDelivery struct {
	ID, TenantID, EndpointID, EventID, EventType, JobID string
	Body                                                []byte
}

// InsertDeliveries writes deliveries inside the projection's transaction;
// rows already present (a re-read record) are left alone.
func InsertDeliveries(ctx context.Context, tx pgx.Tx, ds []NewDelivery) error {
	if len(ds) == 0 {
		return nil
	}
	n := len(ds)
	ids, tenants, eps, evs, types, jobs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	bodies := make([][]byte, n)
	for i, d := range ds {
		ids[i], tenants[i], eps[i], evs[i], types[i], jobs[i], bodies[i] = d.ID, d.TenantID, d.EndpointID, d.EventID, d.EventType, d.JobID, d.Body
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO webhook_deliveries (id, tenant_id, endpoint_id, event_id, event_type, job_id, body, next_attempt_at)
		SELECT x.id, x.t, x.e, x.ev, x.ty, x.j, x.b, now()
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bytea[]) AS x(id, t, e, ev, ty, j, b)
		JOIN webhook_endpoints w ON w.id = x.e AND w.tenant_id = x.t AND w.deleted_at IS NULL AND w.disabled_at IS NULL
		ON CONFLICT (id) DO NOTHING`, ids, tenants, eps, evs, types, jobs, bodies)
	if err != nil {
		return fmt.Errorf("store: insert deliveries: %w", err)
	}
	return nil
}

// JobRow is a job's queue and type.
type JobRow struct {
	JobID, TenantID, Queue, Type string
	// RunAt is when the attempt that named the job may start (zero: unknown);
	// the row is kept until Retention after it, so a job scheduled far
	// ahead is still matched by filtered endpoints when it runs.
	RunAt time.Time
}

// UpsertJobs remembers the queue and type of jobs. A job seen again (a
// retry) keeps its queue and type, and its row's retention starts over.
func UpsertJobs(ctx context.Context, tx pgx.Tx, js []JobRow) error {
	if len(js) == 0 {
		return nil
	}
	ids, tenants, queues, types := make([]string, len(js)), make([]string, len(js)), make([]string, len(js)), make([]string, len(js))
	runAts := make([]*time.Time, len(js))
	for i, j := range js {
		ids[i], tenants[i], queues[i], types[i] = j.JobID, j.TenantID, j.Queue, j.Type
		if !j.RunAt.IsZero() {
			runAts[i] = &js[i].RunAt
		}
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO webhook_jobs (job_id, tenant_id, queue, type, run_at)
		SELECT DISTINCT ON (id) id, t, q, ty, r
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[]) AS x(id, t, q, ty, r)
		ORDER BY id, r DESC NULLS LAST
		ON CONFLICT (job_id) DO UPDATE SET updated_at = now(),
			run_at = GREATEST(webhook_jobs.run_at, EXCLUDED.run_at)`, ids, tenants, queues, types, runAts)
	if err != nil {
		return fmt.Errorf("store: upsert jobs: %w", err)
	}
	return nil
}

// Jobs returns the known queue and type of jobs, by job id.
func Jobs(ctx context.Context, tx pgx.Tx, ids []string) (map[string]JobRow, error) {
	out := map[string]JobRow{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `SELECT job_id, tenant_id, queue, type FROM webhook_jobs WHERE job_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var j JobRow
		if err := rows.Scan(&j.JobID, &j.TenantID, &j.Queue, &j.Type); err != nil {
			return nil, err
		}
		out[j.JobID] = j
	}
	return out, rows.Err()
}

// Claimed is a delivery claimed for one attempt, with what sending needs.
type Claimed struct {
	ID, TenantID, EndpointID, EventID, EventType string
	Body                                         []byte
	Attempt                                      int // the number of this attempt
	URL                                          string
	SecretEnc, PrevSecretEnc                     []byte
	PrevUntil                                    *time.Time
	// ReplayBy is the key id that asked for this attempt as a replay ("":
	// an attempt of the retry schedule).
	ReplayBy string
}

// Claim takes due deliveries of the given endpoints, at most allow[i] of
// endpoint eps[i] and limit in all, skipping rows another replica is
// claiming (FOR UPDATE SKIP LOCKED). Each claimed row's next_attempt_at is
// pushed out by lease, so a claim lost in a crash is retried after it.
func (s *Store) Claim(ctx context.Context, eps []string, allow []int, limit int, lease time.Duration) ([]Claimed, error) {
	if len(eps) == 0 || limit <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `
		WITH c AS (
			SELECT x.id FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS e(endpoint_id, n, ord)
			CROSS JOIN LATERAL (
				SELECT d.id FROM webhook_deliveries d
				WHERE d.endpoint_id = e.endpoint_id AND d.status = 'pending' AND d.next_attempt_at <= now()
				ORDER BY d.next_attempt_at LIMIT e.n FOR UPDATE SKIP LOCKED
			) x
			ORDER BY e.ord LIMIT $3
		)
		UPDATE webhook_deliveries d SET next_attempt_at = now() + $4::interval, updated_at = now()
		FROM c, webhook_endpoints w
		WHERE d.id = c.id AND w.id = d.endpoint_id AND w.deleted_at IS NULL AND w.disabled_at IS NULL
		RETURNING d.id, d.tenant_id, d.endpoint_id, d.event_id, d.event_type, d.body, d.attempts + 1,
			w.url, w.secret_enc, w.prev_secret_enc, w.prev_secret_until, COALESCE(d.replay_by, '')`,
		eps, allow, limit, lease)
	if err != nil {
		return nil, fmt.Errorf("store: claim: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claimed, error) {
		var c Claimed
		err := r.Scan(&c.ID, &c.TenantID, &c.EndpointID, &c.EventID, &c.EventType, &c.Body, &c.Attempt,
			&c.URL, &c.SecretEnc, &c.PrevSecretEnc, &c.PrevUntil, &c.ReplayBy)
		return c, err
	})
}

// Result is the outcome of one attempt.
type Result struct {
	DeliveryID, EndpointID string
	Attempt                int
	At                     time.Time
	StatusCode             int // 0: no response
	Latency                time.Duration
	Error                  string
	// Delivered: 2xx. Otherwise NextAttempt is when to retry, or zero to
	// give up (status failed).
	Delivered   bool
	NextAttempt time.Time
	// Disable, when set, disables the endpoint with this reason (410 Gone).
	Disable string
	// DisableAfter disables the endpoint when it has failed without a
	// success for this long (0: never).
	DisableAfter time.Duration
	// Exchange is what was sent and what came back, for the delivery log.
	Exchange Exchange
	// ReplayedBy is the key id that asked for this attempt as a replay.
	ReplayedBy string
}

// Exchange is the logged request and response of one attempt.
type Exchange struct {
	// RequestHeaders are the headers sent, the signature redacted.
	RequestHeaders map[string]string
	// ResponseHeaders are the headers received (nil: no response), the
	// secret-looking ones redacted.
	ResponseHeaders map[string]string
	// ResponseBody is the start of the response body, as storable text.
	ResponseBody string
	// ResponseTruncated says the body was longer than what is kept.
	ResponseTruncated bool
}

// Record stores an attempt, moves the delivery on and keeps the endpoint's
// health. It returns the reason the endpoint was disabled, if it was.
func (s *Store) Record(ctx context.Context, r Result) (disabled string, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var code *int
		if r.StatusCode != 0 {
			code = &r.StatusCode
		}
		ms := int(r.Latency.Milliseconds())
		if err := insertAttempt(ctx, tx, r, code, ms); err != nil {
			return err
		}
		status, next := StatusPending, &r.NextAttempt
		var deliveredAt *time.Time
		switch {
		case r.Delivered:
			status, next, deliveredAt = StatusDelivered, nil, &r.At
		case r.NextAttempt.IsZero():
			status, next = StatusFailed, nil
		}
		if _, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET status = $2, attempts = GREATEST(attempts, $3),
			next_attempt_at = $4, last_status_code = $5, last_latency_ms = $6, last_error = $7, delivered_at = $8,
			replay_by = NULL, updated_at = now()
			WHERE id = $1 AND status = 'pending'`,
			r.DeliveryID, status, r.Attempt, next, code, ms, r.Error, deliveredAt); err != nil {
			return err
		}
		if r.Delivered {
			_, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = NULL, consecutive_failures = 0
				WHERE id = $1 AND (failing_since IS NOT NULL OR consecutive_failures <> 0)`, r.EndpointID)
			return err
		}
		var failingSince time.Time
		if err := tx.QueryRow(ctx, `UPDATE webhook_endpoints SET failing_since = COALESCE(failing_since, $2),
			consecutive_failures = consecutive_failures + 1 WHERE id = $1 RETURNING failing_since`,
			r.EndpointID, r.At).Scan(&failingSince); err != nil {
			return err
		}
		disabled = r.Disable
		if disabled == "" && r.DisableAfter > 0 && r.At.Sub(failingSince) >= r.DisableAfter {
			disabled = fmt.Sprintf("every delivery failed for %s (last error: %s)", r.DisableAfter, r.Error)
		}
		if disabled == "" {
			return nil
		}
		tag, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET disabled_at = $2, disabled_reason = $3, updated_at = now()
			WHERE id = $1 AND disabled_at IS NULL`, r.EndpointID, r.At, disabled)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			disabled = "" // already disabled by another attempt
			return nil
		}
		return cancelPending(ctx, tx, r.EndpointID, "endpoint disabled")
	})
	return disabled, err
}

// Final delivery statuses, as the retention index (migration 0002) lists them.
const finalStatuses = `('delivered', 'failed', 'cancelled')`

// Expire deletes, in statements of at most chunk rows, the deliveries that
// reached a final state (delivered, failed, cancelled) before cutoff with
// their attempts (ON DELETE CASCADE), and the webhook_jobs rows neither
// seen nor due to run since cutoff. Pending deliveries are never deleted,
// however old. It returns how many deliveries and job rows it deleted.
func (s *Store) Expire(ctx context.Context, cutoff time.Time, chunk int) (deliveries, jobs int64, err error) {
	deliveries, err = deleteChunks(ctx, s.pool, `
		DELETE FROM webhook_deliveries WHERE id IN (
			SELECT id FROM webhook_deliveries
			WHERE status IN `+finalStatuses+` AND updated_at < $1 LIMIT $2)`, cutoff, chunk)
	if err != nil {
		return deliveries, 0, fmt.Errorf("store: expire deliveries: %w", err)
	}
	jobs, err = deleteChunks(ctx, s.pool, `
		DELETE FROM webhook_jobs WHERE job_id IN (
			SELECT job_id FROM webhook_jobs WHERE GREATEST(updated_at, run_at) < $1 LIMIT $2)`, cutoff, chunk)
	if err != nil {
		return deliveries, jobs, fmt.Errorf("store: expire jobs: %w", err)
	}
	return deliveries, jobs, nil
}

// deleteChunks runs a DELETE of at most chunk rows ($2) until it deletes
// fewer, and returns the rows deleted in all.
func deleteChunks(ctx context.Context, pool *pgxpool.Pool, sql string, cutoff time.Time, chunk int) (int64, error) {
	var total int64
	for {
		tag, err := pool.Exec(ctx, sql, cutoff, chunk)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(chunk) {
			return total, nil
		}
	}
}
