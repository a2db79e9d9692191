package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Errors of a replay.
var (
	// ErrPending: the delivery is still being sent or retried.
	ErrPending = errors.New("store: the delivery is pending")
	// ErrDisabled: the endpoint is disabled, so nothing would be sent.
	ErrDisabled = errors.New("store: the endpoint is disabled")
)

// Delivery is one row of the delivery log.
type Delivery struct {
	Seq                         int64
	ID, EndpointID, JobID       string
	EventID, EventType          string
	Status                      string
	Attempts                    int
	LastStatusCode, LastLatency *int
	LastError                   string
	NextAttemptAt, DeliveredAt  *time.Time
	CreatedAt                   time.Time
	// ReplayBy is the key id of a replay not sent yet ("" for none).
	ReplayBy string
}

const deliveryCols = `d.seq, d.id, d.endpoint_id, d.job_id, d.event_id, d.event_type, d.status, d.attempts,
	d.last_status_code, d.last_latency_ms, d.last_error, d.next_attempt_at, d.delivered_at, d.created_at,
	COALESCE(d.replay_by, '')`

func scanDelivery(r pgx.CollectableRow) (Delivery, error) {
	var d Delivery
	err := r.Scan(&d.Seq, &d.ID, &d.EndpointID, &d.JobID, &d.EventID, &d.EventType, &d.Status, &d.Attempts,
		&d.LastStatusCode, &d.LastLatency, &d.LastError, &d.NextAttemptAt, &d.DeliveredAt, &d.CreatedAt, &d.ReplayBy)
	return d, err
}

func (s *Store) deliveries(ctx context.Context, sql string, args ...any) ([]Delivery, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("store: deliveries: %w", err)
	}
	return pgx.CollectRows(rows, scanDelivery)
}

// Deliveries lists the deliveries of one endpoint of tenant, newest first,
// older than cursor (a seq; 0 = from the newest).
func (s *Store) Deliveries(ctx context.Context, tenant, endpointID string, cursor int64, limit int) ([]Delivery, error) {
	return s.deliveries(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries d
		WHERE d.tenant_id = $1 AND d.endpoint_id = $2 AND ($3 = 0 OR d.seq < $3)
		ORDER BY d.seq DESC LIMIT $4`, tenant, endpointID, cursor, limit)
}

// JobDeliveries lists the deliveries the events of one job of tenant
// caused, to any of its endpoints (deleted ones too), newest first, older
// than cursor (a seq; 0 = from the newest).
func (s *Store) JobDeliveries(ctx context.Context, tenant, jobID string, cursor int64, limit int) ([]Delivery, error) {
	return s.deliveries(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries d
		WHERE d.tenant_id = $1 AND d.job_id = $2 AND ($3 = 0 OR d.seq < $3)
		ORDER BY d.seq DESC LIMIT $4`, tenant, jobID, cursor, limit)
}

// Attempt is one attempt of the delivery log, with its exchange.
type Attempt struct {
	Attempt    int
	At         time.Time
	StatusCode *int
	LatencyMS  int
	Error      string
	ReplayedBy string
	Exchange   Exchange
}

// DeliveryLog is one delivery with the request body it sends and every
// attempt, oldest first.
type DeliveryLog struct {
	Delivery
	Body     []byte
	Attempts []Attempt
}

// Delivery returns delivery id of endpoint endpointID of tenant with its
// attempts (ErrNotFound when there is none).
func (s *Store) Delivery(ctx context.Context, tenant, endpointID, id string) (DeliveryLog, error) {
	var out DeliveryLog
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryCols+`, d.body FROM webhook_deliveries d
		WHERE d.tenant_id = $1 AND d.endpoint_id = $2 AND d.id = $3`, tenant, endpointID, id)
	if err != nil {
		return out, fmt.Errorf("store: delivery: %w", err)
	}
	out, err = pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (DeliveryLog, error) {
		var l DeliveryLog
		d := &l.Delivery
		err := r.Scan(&d.Seq, &d.ID, &d.EndpointID, &d.JobID, &d.EventID, &d.EventType, &d.Status, &d.Attempts,
			&d.LastStatusCode, &d.LastLatency, &d.LastError, &d.NextAttemptAt, &d.DeliveredAt, &d.CreatedAt, &d.ReplayBy, &l.Body)
		return l, err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return out, ErrNotFound
	}
	if err != nil {
		return out, fmt.Errorf("store: delivery: %w", err)
	}
	out.Attempts, err = s.attempts(ctx, id)
	return out, err
}

func (s *Store) attempts(ctx context.Context, deliveryID string) ([]Attempt, error) {
	rows, err := s.pool.Query(ctx, `SELECT attempt, at, status_code, latency_ms, error, COALESCE(replayed_by, ''),
			request_headers, response_headers, COALESCE(response_body, ''), response_truncated
		FROM webhook_attempts WHERE delivery_id = $1 ORDER BY attempt`, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("store: attempts: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		err := r.Scan(&a.Attempt, &a.At, &a.StatusCode, &a.LatencyMS, &a.Error, &a.ReplayedBy,
			&a.Exchange.RequestHeaders, &a.Exchange.ResponseHeaders, &a.Exchange.ResponseBody, &a.Exchange.ResponseTruncated)
		return a, err
	})
}

// insertAttempt records attempt r (a repeat of the same attempt number, a
// claim retried after a lost lease, overwrites it).
func insertAttempt(ctx context.Context, tx pgx.Tx, r Result, code *int, latencyMS int) error {
	reqH, err := headersJSON(r.Exchange.RequestHeaders)
	if err != nil {
		return err
	}
	respH, err := headersJSON(r.Exchange.ResponseHeaders)
	if err != nil {
		return err
	}
	var replayedBy *string
	if r.ReplayedBy != "" {
		replayedBy = &r.ReplayedBy
	}
	_, err = tx.Exec(ctx, `INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, latency_ms, error,
			request_headers, response_headers, response_body, response_truncated, replayed_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (delivery_id, attempt)
		DO UPDATE SET at = EXCLUDED.at, status_code = EXCLUDED.status_code, latency_ms = EXCLUDED.latency_ms, error = EXCLUDED.error,
			request_headers = EXCLUDED.request_headers, response_headers = EXCLUDED.response_headers,
			response_body = EXCLUDED.response_body, response_truncated = EXCLUDED.response_truncated, replayed_by = EXCLUDED.replayed_by`,
		r.DeliveryID, r.Attempt, r.At, code, latencyMS, r.Error, reqH, respH, r.Exchange.ResponseBody, r.Exchange.ResponseTruncated, replayedBy)
	return err
}

// headersJSON is h as a jsonb argument (NULL when nil).
func headersJSON(h map[string]string) (*string, error) {
	if h == nil {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	js := string(b)
	return &js, nil
}

// Replay makes delivery id of endpoint endpointID of tenant due now as a
// replay asked for by actor: the delivery loop sends it once more (signed
// afresh) and records the attempt as a replay. A pending delivery cannot
// be replayed (ErrPending), nor one of a disabled endpoint (ErrDisabled).
func (s *Store) Replay(ctx context.Context, tenant, endpointID, id, actor string) (Delivery, error) {
	rows, err := s.pool.Query(ctx, `UPDATE webhook_deliveries d SET status = 'pending', next_attempt_at = now(),
			replay_by = $4, updated_at = now()
		FROM webhook_endpoints w
		WHERE d.tenant_id = $1 AND d.endpoint_id = $2 AND d.id = $3 AND d.status <> 'pending'
			AND w.id = d.endpoint_id AND w.deleted_at IS NULL AND w.disabled_at IS NULL
		RETURNING `+deliveryCols, tenant, endpointID, id, actor)
	if err != nil {
		return Delivery{}, fmt.Errorf("store: replay: %w", err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanDelivery)
	if err == nil || !errors.Is(err, pgx.ErrNoRows) {
		return d, err
	}
	// Nothing was changed: say why.
	cur, err := s.Delivery(ctx, tenant, endpointID, id)
	if err != nil {
		return Delivery{}, err
	}
	if cur.Status == StatusPending {
		return cur.Delivery, ErrPending
	}
	return cur.Delivery, ErrDisabled
}
