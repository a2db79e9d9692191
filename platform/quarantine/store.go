package quarantine

import (
	"context"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/pgstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the quarantine schema migrations; `ferry migrate` applies them.
var Migrations = pgstore.Register("quarantine", migrations, "migrations")

// Migrate creates the quarantine table (platform/projection's Migrate runs
// it, so every service with Postgres has it).
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return Migrations.Apply(ctx, pool)
}

// Status of a quarantined record.
type Status string

// The statuses: parked until an operator acts; retry while the owning
// consumer is to re-apply it; resolved once re-applied; discarded by an
// operator (kept, never deleted).
const (
	StatusParked    Status = "parked"
	StatusRetry     Status = "retry"
	StatusResolved  Status = "resolved"
	StatusDiscarded Status = "discarded"
)

// Statuses lists every status, for validation and the gauge.
var Statuses = []Status{StatusParked, StatusRetry, StatusResolved, StatusDiscarded}

// Errors of the operator actions.
var (
	ErrNotFound = errors.New("quarantine: no such record")
	// ErrState: the action does not apply to the record's status (a
	// resolved record cannot be retried or discarded).
	ErrState = errors.New("quarantine: action not allowed in this status")
)

// Execer runs a statement: a pool or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Bytes is a byte string shown safely: as text when it is valid UTF-8
// without NUL, else as standard base64.
type Bytes struct {
	Encoding string `json:"encoding"` // "text" or "base64"
	Data     string `json:"data"`
}

// EncodeBytes returns b in its safe form.
func EncodeBytes(b []byte) Bytes {
	if utf8.Valid(b) && !strings.ContainsRune(string(b), 0) {
		return Bytes{Encoding: "text", Data: string(b)}
	}
	return Bytes{Encoding: "base64", Data: base64.StdEncoding.EncodeToString(b)}
}

// Raw returns the original bytes.
func (b Bytes) Raw() ([]byte, error) {
	switch b.Encoding {
	case "text":
		return []byte(b.Data), nil
	case "base64":
		return base64.StdEncoding.DecodeString(b.Data)
	}
	return nil, fmt.Errorf("quarantine: unknown encoding %q", b.Encoding)
}

// Header is one record header in its safe form.
type Header struct {
	Key   Bytes `json:"key"`
	Value Bytes `json:"value"`
}

// Record is one quarantined record.
type Record struct {
	ID               int64
	Group            string
	Topic            string
	Partition        int32
	Offset           int64
	Key              []byte // nil when the record had no key
	Value            []byte // nil in a List
	ValueBytes       int    // the value's length, also in a List
	Headers          []Header
	RecordTime       *time.Time
	Error            string
	FirstSeen        time.Time
	LastSeen         time.Time
	Tries            int
	Status           Status
	RetryRequestedAt *time.Time
	ResolvedAt       *time.Time
	DiscardedAt      *time.Time
	DiscardedBy      string
	DiscardReason    string
}

// KafkaRecord rebuilds the Kafka record, for a re-apply.
func (r Record) KafkaRecord() (*kgo.Record, error) {
	rec := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Context: context.Background()}
	if r.RecordTime != nil {
		rec.Timestamp = *r.RecordTime
	}
	for _, h := range r.Headers {
		k, err := h.Key.Raw()
		if err != nil {
			return nil, err
		}
		v, err := h.Value.Raw()
		if err != nil {
			return nil, err
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: string(k), Value: v})
	}
	return rec, nil
}

// maxErrorBytes bounds the stored error text.
const maxErrorBytes = 8 << 10

// errorText makes err storable in a text column: valid UTF-8, no NUL,
// at most maxErrorBytes.
func errorText(err error) string {
	s := strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "\uFFFD"), "\x00", `\u0000`)
	return Truncate(s, maxErrorBytes)
}

// Truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func Truncate(s string, n int) string {
	const mark = "…[truncated]"
	if len(s) <= n {
		return s
	}
	suffix := mark
	if n < len(mark) {
		suffix = ""
	}
	cut := n - len(suffix)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + suffix
}

// Park stores rec as quarantined by group with its cause, through db (the
// transaction that also moves the group's offsets past rec, for an
// exactly-once consumer). Parking the same record again (a consumer that
// replays after a crash) updates its error, last_seen and tries, and puts
// a record being retried back to parked; a resolved or discarded record
// keeps its status.
func Park(ctx context.Context, db Execer, group string, rec *kgo.Record, cause error, tries int) error {
	headers := make([]Header, 0, len(rec.Headers))
	for _, h := range rec.Headers {
		headers = append(headers, Header{Key: EncodeBytes([]byte(h.Key)), Value: EncodeBytes(h.Value)})
	}
	hj, err := json.Marshal(headers)
	if err != nil {
		return fmt.Errorf("quarantine: encode headers: %w", err)
	}
	var at *time.Time
	if !rec.Timestamp.IsZero() {
		ts := rec.Timestamp
		at = &ts
	}
	value := rec.Value
	if value == nil {
		value = []byte{}
	}
	_, err = db.Exec(ctx, `
		INSERT INTO ferry_quarantine (consumer_group, topic, partition, "offset", key, value, headers, record_time, error, tries)
		VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10)
		ON CONFLICT (consumer_group, topic, partition, "offset") DO UPDATE SET
			error = EXCLUDED.error, last_seen = now(), tries = ferry_quarantine.tries + EXCLUDED.tries,
			status = CASE WHEN ferry_quarantine.status = 'retry' THEN 'parked' ELSE ferry_quarantine.status END`,
		group, rec.Topic, rec.Partition, rec.Offset, rec.Key, value, string(hj), at, errorText(cause), tries)
	if err != nil {
		return fmt.Errorf("quarantine: park %s/%d@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
	}
	return nil
}

// Store reads and changes quarantined records for operators.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store over pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// columns are the columns scanRecord reads; listColumns leave the value
// out (a list is for finding a record, inspecting it reads the value).
const (
	columns = `id, consumer_group, topic, partition, "offset", key, value, headers, record_time, error,
	first_seen, last_seen, tries, status, retry_requested_at, resolved_at, discarded_at,
	COALESCE(discarded_by, ''), COALESCE(discard_reason, ''), COALESCE(octet_length(value), 0)`
	listColumns = `id, consumer_group, topic, partition, "offset", key, NULL::bytea, headers, record_time, error,
	first_seen, last_seen, tries, status, retry_requested_at, resolved_at, discarded_at,
	COALESCE(discarded_by, ''), COALESCE(discard_reason, ''), COALESCE(octet_length(value), 0)`
)

func scanRecord(row pgx.Row) (Record, error) {
	var r Record
	var headers []byte
	var status string
	err := row.Scan(&r.ID, &r.Group, &r.Topic, &r.Partition, &r.Offset, &r.Key, &r.Value, &headers, &r.RecordTime,
		&r.Error, &r.FirstSeen, &r.LastSeen, &r.Tries, &status, &r.RetryRequestedAt, &r.ResolvedAt, &r.DiscardedAt,
		&r.DiscardedBy, &r.DiscardReason, &r.ValueBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf("quarantine: read record: %w", err)
	}
	r.Status = Status(status)
	if err := json.Unmarshal(headers, &r.Headers); err != nil {
		return r, fmt.Errorf("quarantine: record %d headers: %w", r.ID, err)
	}
	return r, nil
}

// Filter selects records to list; empty fields select all.
type Filter struct {
	Group  string
	Status Status
	// AfterID continues a listing after the record with this id.
	AfterID int64
	Limit   int
}

// List returns records matching f, oldest first (by id), without their
// values.
func (s *Store) List(ctx context.Context, f Filter) ([]Record, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+listColumns+` FROM ferry_quarantine
		WHERE ($1 = '' OR consumer_group = $1) AND ($2 = '' OR status = $2) AND id > $3
		ORDER BY id LIMIT $4`, f.Group, string(f.Status), f.AfterID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("quarantine: list: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Get returns one record, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id int64) (Record, error) {
	return scanRecord(s.pool.QueryRow(ctx, `SELECT `+columns+` FROM ferry_quarantine WHERE id = $1`, id))
}

// Retry asks the record's consumer to re-apply it (its Watch loop picks it
// up within its interval). A record already marked for retry is returned as
// is; a discarded record may be retried; a resolved one is ErrState.
func (s *Store) Retry(ctx context.Context, id int64) (Record, error) {
	return s.transition(ctx, id, StatusRetry, `UPDATE ferry_quarantine SET status = 'retry', retry_requested_at = now(),
		discarded_at = NULL, discarded_by = NULL, discard_reason = NULL
		WHERE id = $1 AND status IN ('parked', 'discarded') RETURNING `+columns)
}

// Discard marks the record discarded by who, with an optional reason. It
// stays listable; discarding it again returns it as is; a resolved record is
// ErrState.
func (s *Store) Discard(ctx context.Context, id int64, who, reason string) (Record, error) {
	return s.transition(ctx, id, StatusDiscarded, `UPDATE ferry_quarantine SET status = 'discarded', discarded_at = now(),
		discarded_by = $2, discard_reason = NULLIF($3, '')
		WHERE id = $1 AND status IN ('parked', 'retry') RETURNING `+columns, who, reason)
}

// transition runs update (which changes the row only from the statuses the
// action applies to); when it changes nothing it tells a missing record
// (ErrNotFound), one already in target (returned as is) and any other
// status (ErrState).
func (s *Store) transition(ctx context.Context, id int64, target Status, update string, args ...any) (Record, error) {
	r, err := scanRecord(s.pool.QueryRow(ctx, update, append([]any{id}, args...)...))
	if !errors.Is(err, ErrNotFound) {
		return r, err
	}
	cur, err := s.Get(ctx, id)
	if err != nil {
		return cur, err
	}
	if cur.Status == target {
		return cur, nil
	}
	return cur, fmt.Errorf("%w: record %d is %s", ErrState, id, cur.Status)
}

// Counts returns the number of group's records per status (every status
// present, zero included).
func (s *Store) Counts(ctx context.Context, group string) (map[Status]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM ferry_quarantine WHERE consumer_group = $1 GROUP BY status`, group)
	if err != nil {
		return nil, fmt.Errorf("quarantine: counts: %w", err)
	}
	defer rows.Close()
	out := make(map[Status]int64, len(Statuses))
	for _, st := range Statuses {
		out[st] = 0
	}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[Status(st)] = n
	}
	return out, rows.Err()
}
