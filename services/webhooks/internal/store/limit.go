package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrTooManyEndpoints is returned by CreateEndpointLimited when the tenant
// already has as many endpoints as it may.
var ErrTooManyEndpoints = errors.New("store: the tenant has reached its webhook endpoint limit")

// CreateEndpointLimited inserts e unless its tenant already has its limit of
// (not deleted) endpoints: the tenant's max_webhook_endpoints setting, or
// def when it has none. Creations of one tenant are serialized by a
// transaction-scoped advisory lock, so concurrent requests cannot pass the
// limit together. It returns the limit that applied.
func (s *Store) CreateEndpointLimited(ctx context.Context, e Endpoint, def int) (Endpoint, int, error) {
	var created Endpoint
	limit := def
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('ferry.webhook_endpoints:' || $1, 0))`, e.TenantID); err != nil {
			return fmt.Errorf("store: endpoint limit lock: %w", err)
		}
		var own, n int
		err := tx.QueryRow(ctx, `SELECT
			COALESCE((SELECT (settings->>'max_webhook_endpoints')::int FROM tenants WHERE id = $1), 0),
			(SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $1 AND deleted_at IS NULL)`, e.TenantID).Scan(&own, &n)
		if err != nil {
			return fmt.Errorf("store: endpoint limit: %w", err)
		}
		if own > 0 {
			limit = own
		}
		if n >= limit {
			return ErrTooManyEndpoints
		}
		if e.EventTypes == nil {
			e.EventTypes = []string{}
		}
		created, err = scanEndpoint(tx.QueryRow(ctx, `
			INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, filter_queue, filter_type, description, secret_enc)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+endpointCols,
			e.ID, e.TenantID, e.URL, e.EventTypes, e.FilterQueue, e.FilterType, e.Description, e.SecretEnc))
		return err
	})
	return created, limit, err
}
