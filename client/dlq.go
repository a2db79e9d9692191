package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/url"
	"time"
)

// DLQEntry is one dead-lettered job (docs/dlq.md).
type DLQEntry struct {
	// ID is the dead job's id.
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Type     string `json:"type"`
	Queue    string `json:"queue"`
	// Attempt is the attempt that was dead-lettered.
	Attempt int       `json:"attempt"`
	Error   ErrorInfo `json:"error"`
	Job     JobSpec   `json:"job"`
	// History is every attempt, oldest first.
	History      []Attempt   `json:"history"`
	CreatedAt    time.Time   `json:"created_at"`
	DeadAt       time.Time   `json:"dead_at"`
	RedrivenFrom string      `json:"redriven_from,omitempty"`
	Suppressed   bool        `json:"suppressed"`
	SuppressedAt *time.Time  `json:"suppressed_at,omitempty"`
	SuppressedBy string      `json:"suppressed_by,omitempty"`
	Redrive      *DLQRedrive `json:"redrive"`
}

// JobSpec is a submission with defaults applied, as the dead job had it.
type JobSpec struct {
	Type        string          `json:"type"`
	Queue       string          `json:"queue"`
	Priority    int             `json:"priority"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	MaxAttempts int             `json:"max_attempts"`
	Timeout     string          `json:"timeout,omitempty"`
	NotAfter    *time.Time      `json:"not_after,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Pool        string          `json:"pool"`
	Backoff     json.RawMessage `json:"backoff,omitempty"`
}

// Attempt is one finished attempt of a job.
type Attempt struct {
	Attempt    int        `json:"attempt"`
	Class      string     `json:"class,omitempty"`
	Error      string     `json:"error,omitempty"`
	WorkerID   string     `json:"worker_id,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// DLQRedrive is the re-drive of an entry: the new job, who and when.
type DLQRedrive struct {
	JobID string `json:"job_id"`
	// State is "pending" while the new job's event is produced, then "done".
	State       string     `json:"state"`
	By          string     `json:"by"`
	At          *time.Time `json:"at,omitempty"`
	ConfirmedAt *time.Time `json:"confirmed_at,omitempty"`
}

// DLQFilter selects entries; zero fields match all.
type DLQFilter struct {
	Type  string `json:"type,omitempty"`
	Queue string `json:"queue,omitempty"`
	// Class is the final error class.
	Class string `json:"class,omitempty"`
	// Q is a case-insensitive substring of the final error message.
	Q    string     `json:"q,omitempty"`
	From *time.Time `json:"from,omitempty"` // dead_at ≥ From
	To   *time.Time `json:"to,omitempty"`   // dead_at < To
}

// DLQListOptions filter and page ListDLQ and DLQEntries.
type DLQListOptions struct {
	DLQFilter
	Limit  int // 1 to 500; 0 for 50
	Cursor string
}

func (o DLQListOptions) query() url.Values {
	q := url.Values{}
	setIf(q, "type", o.Type)
	setIf(q, "queue", o.Queue)
	setIf(q, "class", o.Class)
	setIf(q, "q", o.Q)
	if o.From != nil {
		q.Set("from", o.From.Format(time.RFC3339Nano))
	}
	if o.To != nil {
		q.Set("to", o.To.Format(time.RFC3339Nano))
	}
	setPage(q, o.Cursor, o.Limit)
	return q
}

// DLQPage is one page of entries, newest dead first.
type DLQPage struct {
	Entries    []DLQEntry `json:"entries"`
	NextCursor string     `json:"next_cursor"`
}

// ListDLQ returns one page of the tenant's dead-lettered jobs.
func (c *Client) ListDLQ(ctx context.Context, opts DLQListOptions) (*DLQPage, error) {
	cl, _ := newCall(http.MethodGet, "/v1/dlq", nil)
	cl.query = opts.query()
	var page DLQPage
	if _, err := c.decode(ctx, cl, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// DLQEntries iterates over every entry matching opts, page after page.
func (c *Client) DLQEntries(ctx context.Context, opts DLQListOptions) iter.Seq2[DLQEntry, error] {
	return paginate(opts.Cursor, func(cursor string) ([]DLQEntry, string, error) {
		o := opts
		o.Cursor = cursor
		p, err := c.ListDLQ(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return p.Entries, p.NextCursor, nil
	})
}

// entryCall runs method on /v1/dlq/{id}<suffix> and decodes an entry.
func (c *Client) entryCall(ctx context.Context, method, id, suffix string) (*DLQEntry, error) {
	if id == "" {
		return nil, errEmptyID
	}
	cl, _ := newCall(method, "/v1/dlq/"+pathEscape(id)+suffix, nil)
	cl.idempotent = true // reads, and suppress/unsuppress/purge set a state
	var e DLQEntry
	if _, err := c.decode(ctx, cl, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// GetDLQ returns the entry of a dead job.
func (c *Client) GetDLQ(ctx context.Context, id string) (*DLQEntry, error) {
	return c.entryCall(ctx, http.MethodGet, id, "")
}

// SuppressDLQ suppresses an entry: bulk re-drives skip it.
func (c *Client) SuppressDLQ(ctx context.Context, id string) (*DLQEntry, error) {
	return c.entryCall(ctx, http.MethodPost, id, "/suppress")
}

// UnsuppressDLQ lifts the suppression of an entry.
func (c *Client) UnsuppressDLQ(ctx context.Context, id string) (*DLQEntry, error) {
	return c.entryCall(ctx, http.MethodDelete, id, "/suppress")
}

// PurgeDLQ deletes an entry and its re-drive record.
func (c *Client) PurgeDLQ(ctx context.Context, id string) error {
	_, err := c.entryCall(ctx, http.MethodDelete, id, "")
	return err
}

// RedriveRequest edits a re-drive; the zero value re-drives the original.
type RedriveRequest struct {
	// Payload replaces the payload when not nil; json.RawMessage("null")
	// clears it.
	Payload json.RawMessage `json:"payload,omitempty"`
	// MaxAttempts replaces the attempt budget when > 0.
	MaxAttempts int `json:"max_attempts,omitempty"`
}

// RedriveResult is the answer of Redrive.
type RedriveResult struct {
	// Job is the new job as enqueued (Get has its live status).
	Job   Job      `json:"job"`
	Entry DLQEntry `json:"entry"`
	// Deduplicated says the entry had been re-driven before: Job is that
	// first re-drive's job.
	Deduplicated bool `json:"deduplicated"`
}

// Redrive re-drives one dead job as a new job with a fresh attempt budget.
// An entry is re-driven at most once, so the call is retried safely.
func (c *Client) Redrive(ctx context.Context, id string, req *RedriveRequest) (*RedriveResult, error) {
	if id == "" {
		return nil, errEmptyID
	}
	if req == nil {
		req = &RedriveRequest{}
	}
	cl, err := newCall(http.MethodPost, "/v1/dlq/"+pathEscape(id)+"/redrive", req)
	if err != nil {
		return nil, err
	}
	cl.idempotent = true
	var out RedriveResult
	if _, err := c.decode(ctx, cl, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// BulkRedriveRequest re-drives the entries matching Filter.
type BulkRedriveRequest struct {
	Filter DLQFilter `json:"filter"`
	// DryRun only counts (and samples) what a real run would re-drive.
	DryRun bool `json:"dry_run"`
	// Limit is the most entries this call re-drives; 0 for the service's
	// maximum.
	Limit int `json:"limit,omitempty"`
}

// BulkRedriveResult is the answer of RedriveDLQ.
type BulkRedriveResult struct {
	DryRun bool `json:"dry_run"`
	// Count is what a real run would re-drive (dry run) or re-drove.
	Count int `json:"count"`
	// Sample holds up to 10 matching entries (dry run only).
	Sample   []DLQEntry `json:"sample,omitempty"`
	Redriven int        `json:"redriven"`
	// Failed entries were not produced and are still re-drivable.
	Failed int `json:"failed"`
	// Remaining entries still match: call again while > 0.
	Remaining int `json:"remaining"`
}

// RedriveDLQ re-drives (or, with DryRun, counts) the entries matching a
// filter, skipping suppressed and already re-driven ones.
func (c *Client) RedriveDLQ(ctx context.Context, req BulkRedriveRequest) (*BulkRedriveResult, error) {
	cl, err := newCall(http.MethodPost, "/v1/dlq/redrive", req)
	if err != nil {
		return nil, err
	}
	// Repeating a run re-drives nothing twice (re-driven entries are
	// skipped), but its counts would describe the second call only: retry
	// after a network error only when counting.
	cl.idempotent = req.DryRun
	var out BulkRedriveResult
	if _, err := c.decode(ctx, cl, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
