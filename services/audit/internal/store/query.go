package store

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event is one audit row as the API shows it.
type Event struct {
	EventID    string          `json:"event_id"`
	TenantID   string          `json:"tenant_id"`
	JobID      string          `json:"job_id"`
	Type       string          `json:"type"`
	Attempt    int             `json:"attempt"`
	OccurredAt time.Time       `json:"occurred_at"`
	RecordedAt time.Time       `json:"recorded_at"`
	Actor      string          `json:"actor"`
	TraceID    string          `json:"trace_id,omitempty"`
	Data       json.RawMessage `json:"data"`
	ChainID    string          `json:"chain_id"`
	Seq        int64           `json:"seq"`
	PrevHash   string          `json:"prev_hash"`
	Hash       string          `json:"hash"`
}

// Filter selects a tenant's events. Zero fields do not filter.
type Filter struct {
	TenantID string
	JobID    string
	Type     string
	Actor    string
	// From is inclusive, To exclusive, on occurred_at.
	From, To time.Time
}

// Cursor is a keyset position: the last (occurred_at, event_id) returned.
type Cursor struct {
	Occurred time.Time
	EventID  string
}

const eventColumns = `event_id, tenant_id, job_id, type, attempt, occurred_at, recorded_at,
	actor, trace_id, data::text, chain_id, seq, prev_hash, hash`

// List returns up to limit events matching f after the cursor (nil: from
// the start), in (occurred_at, event_id) order, and the cursor of the next
// page (nil when this page is the last).
func (s *Store) List(ctx context.Context, f Filter, after *Cursor, limit int) ([]Event, *Cursor, error) {
	var out []Event
	if _, err := s.page(ctx, f, after, limit+1, func(e Event) error { out = append(out, e); return nil }); err != nil {
		return nil, nil, err
	}
	if len(out) <= limit {
		return out, nil, nil
	}
	out = out[:limit]
	last := out[limit-1]
	return out, &Cursor{Occurred: last.OccurredAt, EventID: last.EventID}, nil
}

// Each calls fn with every event matching f in (occurred_at, event_id)
// order, a page of at most batch rows at a time (keyset pagination), so
// memory stays flat whatever the number of rows. Each page is read whole
// and its connection returned to the pool before fn sees it: fn may block
// (writing to a slow client) without holding a Postgres connection that
// audit reads, authentication and the projection need.
//
// A page also ends once its rows hold maxPageBytes of data, so a page of
// large payloads does not hold batch × the largest payload in memory.
func (s *Store) Each(ctx context.Context, f Filter, batch int, fn func([]Event) error) error {
	var after *Cursor
	buf := make([]Event, 0, batch)
	for {
		buf = buf[:0]
		size, full := 0, false
		last, err := s.page(ctx, f, after, batch, func(e Event) error {
			buf = append(buf, e)
			if size += len(e.Data); size >= maxPageBytes {
				full = true
				return errPageFull
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(buf) > 0 {
			if err := fn(buf); err != nil {
				return err
			}
		}
		if len(buf) < batch && !full {
			return nil
		}
		after = last
	}
}

// maxPageBytes bounds the data of one page of Each.
const maxPageBytes = 4 << 20

// errPageFull tells page to end the page after the row just handed over.
var errPageFull = errors.New("audit: page full")

// page streams one keyset page to fn and returns the position of its last row.
func (s *Store) page(ctx context.Context, f Filter, after *Cursor, limit int, fn func(Event) error) (*Cursor, error) {
	q, args := pageQuery(f, after, limit)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("audit: list: %w", err)
	}
	defer rows.Close()
	var last *Cursor
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		err = fn(e)
		if err != nil && !errors.Is(err, errPageFull) {
			return nil, err
		}
		last = &Cursor{Occurred: e.OccurredAt, EventID: e.EventID}
		if err != nil {
			break // the page is full: rows.Close in the defer ends the query
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit: list: %w", err)
	}
	return last, nil
}

// pageQuery is the statement of one keyset page of f after the cursor
// after (nil: the first page) and its arguments: a tenant's events in
// (occurred_at, event_id) order. A job filter is served by the hash index
// on job_id, the rest by the tenant's time index (TestJobFilterPlan).
func pageQuery(f Filter, after *Cursor, limit int) (string, []any) {
	where := []string{"tenant_id = $1"}
	args := []any{f.TenantID}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.JobID != "" {
		add("job_id = $%d", f.JobID)
	}
	if f.Type != "" {
		add("type = $%d", f.Type)
	}
	if f.Actor != "" {
		add("actor = $%d", f.Actor)
	}
	if !f.From.IsZero() {
		add("occurred_at >= $%d", f.From)
	}
	if !f.To.IsZero() {
		add("occurred_at < $%d", f.To)
	}
	if after != nil {
		args = append(args, after.Occurred, after.EventID)
		where = append(where, fmt.Sprintf("(occurred_at, event_id) > ($%d, $%d)", len(args)-1, len(args)))
	}
	args = append(args, limit)
	q := `SELECT ` + eventColumns + ` FROM audit_events WHERE ` + strings.Join(where, " AND ") +
		fmt.Sprintf(` ORDER BY occurred_at, event_id LIMIT $%d`, len(args))
	return q, args
}

func scanEvent(rows pgx.Rows) (Event, error) {
	var e Event
	var data string
	var prev, hash []byte
	if err := rows.Scan(&e.EventID, &e.TenantID, &e.JobID, &e.Type, &e.Attempt, &e.OccurredAt, &e.RecordedAt,
		&e.Actor, &e.TraceID, &data, &e.ChainID, &e.Seq, &prev, &hash); err != nil {
		return Event{}, fmt.Errorf("audit: scan: %w", err)
	}
	e.OccurredAt, e.RecordedAt = e.OccurredAt.UTC(), e.RecordedAt.UTC()
	e.Data = json.RawMessage(data)
	e.PrevHash, e.Hash = hex.EncodeToString(prev), hex.EncodeToString(hash)
	return e, nil
}
