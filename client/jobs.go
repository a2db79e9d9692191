package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Status is a job's status.
type Status string

// Job statuses.
const (
	StatusQueued    Status = "queued"
	StatusScheduled Status = "scheduled"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusDead      Status = "dead"
	StatusCancelled Status = "cancelled"
)

// Terminal says the job will not change any more.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusDead || s == StatusCancelled
}

// Job is a job as the API shows it. (The server's definition is in
// platform/jobs; this package uses the standard library only, and a test
// of the ferry command checks that both have the same fields.)
type Job struct {
	ID           string          `json:"id"`
	TenantID     string          `json:"tenant_id"`
	Type         string          `json:"type"`
	Queue        string          `json:"queue"`
	Priority     int             `json:"priority"`
	Pool         string          `json:"pool,omitempty"`
	Status       Status          `json:"status"`
	Attempt      int             `json:"attempt"`
	MaxAttempts  int             `json:"max_attempts"`
	Payload      json.RawMessage `json:"payload"`
	Tags         []string        `json:"tags"`
	CreatedAt    time.Time       `json:"created_at"`
	ScheduledFor *time.Time      `json:"scheduled_for"`
	StartedAt    *time.Time      `json:"started_at"`
	FinishedAt   *time.Time      `json:"finished_at"`
	Progress     *Progress       `json:"progress"`
	Result       json.RawMessage `json:"result"`
	LastError    *ErrorInfo      `json:"last_error"`
	TraceID      string          `json:"trace_id,omitempty"`
	RedrivenFrom string          `json:"redriven_from,omitempty"`
	// Unique is the job's unique key, when it was submitted with one.
	Unique *JobUnique `json:"unique,omitempty"`
	// Concurrency is the job's concurrency key and limit, when it was
	// submitted with one.
	Concurrency *Concurrency `json:"concurrency,omitempty"`
	// ScheduleID is the schedule whose fire created the job.
	ScheduleID string `json:"schedule_id,omitempty"`
	// Waiting says why a queued job does not run, when no live worker
	// takes its type (docs/workers.md).
	Waiting string `json:"waiting,omitempty"`
	// Deduplicated is set on submission answers: the job is the one of an
	// earlier request with the same Idempotency-Key and body.
	Deduplicated bool `json:"deduplicated,omitempty"`
}

// Progress is the latest progress report of a running job.
type Progress struct {
	Percent float64 `json:"percent"`
	Message string  `json:"message,omitempty"`
}

// ErrorInfo is a failure: its class (app_error, retryable, permanent,
// timeout, worker_lost, expired, cancelled) and message.
type ErrorInfo struct {
	Class   string `json:"class"`
	Message string `json:"message"`
}

// Backoff is a job's retry backoff: min(Base·2^(n-1), Max) ± Jitter.
type Backoff struct {
	Base, Max time.Duration
	// Jitter is the relative spread (0 to 1); nil keeps the default 0.25.
	Jitter *float64
}

// JobRequest is a submission. Zero fields take the API's defaults.
type JobRequest struct {
	Type  string
	Queue string
	// Priority is 0 (most urgent) to 9; nil is the default 5.
	Priority *int
	// Payload is any value encoding/json marshals (or a json.RawMessage).
	Payload     any
	RunAt       time.Time     // earliest start; not with Delay
	Delay       time.Duration // earliest start relative to now; not with RunAt
	MaxAttempts int
	Timeout     time.Duration // per attempt
	NotAfter    time.Time     // deadline; past it the job is dead-lettered as expired
	Tags        []string
	Pool        string // "short" (default) or "long"
	Backoff     *Backoff
	// Concurrency caps the tenant's jobs with its key running at once
	// (docs/flow-control.md); nil for none.
	Concurrency *Concurrency
	// Unique makes a submission answer the tenant's job with the same key
	// while that job is in a state (docs/unique-jobs.md); nil for none.
	Unique *Unique
	// IdempotencyKey is the key of this job. Submit sends it as the
	// Idempotency-Key header (a random one when empty); in SubmitBatch it is
	// the item's own key.
	IdempotencyKey string
}

// Concurrency is a job's concurrency key: at most Limit jobs of the tenant
// with Key run at once (0: the server's default, 1).
type Concurrency struct {
	Key   string `json:"key"`
	Limit int    `json:"limit,omitempty"`
}

// Unique is a job's unique key: while the tenant's job holding Key is in
// the While state, submitting again answers that job (deduplicated).
type Unique struct {
	Key string
	// While is "queued", "active" or "until_done" ("": the server's
	// default, until_done).
	While string
	// TTL bounds how long the key holds (0: the server's default, 24h).
	TTL time.Duration
}

// JobUnique is the unique key of a job resource and until when it holds.
type JobUnique struct {
	Key   string    `json:"key"`
	While string    `json:"while"`
	Until time.Time `json:"until"`
}

// Int returns a pointer to n, for JobRequest.Priority.
func Int(n int) *int { return &n }

// wireDuration renders d as the API's duration string, without the zero
// units Go's String adds ("1h30m", not "1h30m0s").
func wireDuration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalJSON renders the request in the API's shape.
func (r JobRequest) MarshalJSON() ([]byte, error) {
	type backoff struct {
		Base   string   `json:"base,omitempty"`
		Max    string   `json:"max,omitempty"`
		Jitter *float64 `json:"jitter,omitempty"`
	}
	w := struct {
		Type           string       `json:"type"`
		Queue          string       `json:"queue,omitempty"`
		Priority       *int         `json:"priority,omitempty"`
		Payload        any          `json:"payload,omitempty"`
		RunAt          *time.Time   `json:"run_at,omitempty"`
		Delay          string       `json:"delay,omitempty"`
		MaxAttempts    int          `json:"max_attempts,omitempty"`
		Timeout        string       `json:"timeout,omitempty"`
		NotAfter       *time.Time   `json:"not_after,omitempty"`
		Tags           []string     `json:"tags,omitempty"`
		Pool           string       `json:"pool,omitempty"`
		Backoff        *backoff     `json:"backoff,omitempty"`
		Concurrency    *Concurrency `json:"concurrency,omitempty"`
		Unique         *uniqueWire  `json:"unique,omitempty"`
		IdempotencyKey string       `json:"idempotency_key,omitempty"`
	}{Type: r.Type, Queue: r.Queue, Priority: r.Priority, Payload: r.Payload, Delay: wireDuration(r.Delay),
		MaxAttempts: r.MaxAttempts, Timeout: wireDuration(r.Timeout), Tags: r.Tags, Pool: r.Pool,
		Concurrency: r.Concurrency, IdempotencyKey: r.IdempotencyKey}
	if !r.RunAt.IsZero() {
		w.RunAt = &r.RunAt
	}
	if !r.NotAfter.IsZero() {
		w.NotAfter = &r.NotAfter
	}
	if r.Unique != nil {
		w.Unique = &uniqueWire{Key: r.Unique.Key, While: r.Unique.While, TTL: wireDuration(r.Unique.TTL)}
	}
	if r.Backoff != nil {
		w.Backoff = &backoff{Base: wireDuration(r.Backoff.Base), Max: wireDuration(r.Backoff.Max), Jitter: r.Backoff.Jitter}
	}
	return json.Marshal(w)
}

// uniqueWire is Unique in the API's shape.
type uniqueWire struct {
	Key   string `json:"key"`
	While string `json:"while,omitempty"`
	TTL   string `json:"ttl,omitempty"`
}

// SubmitOption configures Submit and SubmitBatch.
type SubmitOption func(*submitConfig)

type submitConfig struct{ key string }

// WithIdempotencyKey sets the request's Idempotency-Key (in a batch, item
// i without its own key uses "<key>#<i>"). Without it the client generates
// a random key, so its own retries are deduplicated.
func WithIdempotencyKey(key string) SubmitOption { return func(c *submitConfig) { c.key = key } }

// SubmitResult is the answer of Submit.
type SubmitResult struct {
	Job Job
	// Deduplicated says an earlier request with the same key and body
	// created the job (this one, or a retry of it, created nothing).
	Deduplicated bool
	// IdempotencyKey is the key sent: keep it to submit again safely later.
	IdempotencyKey string
}

// Submit submits one job. It always sends an Idempotency-Key (the one given
// with WithIdempotencyKey, else req.IdempotencyKey, else a random one) and
// the same body on every attempt, so retries after a 429, a 503 or a lost
// connection never create a second job.
func (c *Client) Submit(ctx context.Context, req JobRequest, opts ...SubmitOption) (*SubmitResult, error) {
	cfg := submitConfig{key: req.IdempotencyKey}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.key == "" {
		cfg.key = NewIdempotencyKey()
	}
	req.IdempotencyKey = "" // the header carries it
	cl, err := newCall(http.MethodPost, "/v1/jobs", req)
	if err != nil {
		return nil, err
	}
	cl.header.Set(IdempotencyKeyHeader, cfg.key)
	cl.idempotent = true
	var job Job
	resp, err := c.decode(ctx, cl, &job)
	if err != nil {
		return nil, err
	}
	return &SubmitResult{Job: job, Deduplicated: resp.status == http.StatusOK || job.Deduplicated, IdempotencyKey: cfg.key}, nil
}

// BatchItem is one item of a batch answer: a job or an error.
type BatchItem struct {
	Job          *Job
	Deduplicated bool
	Err          *APIError
}

// BatchResult is the answer of SubmitBatch, one item per request, in order.
type BatchResult struct {
	Items          []BatchItem
	IdempotencyKey string
}

// batchWire is the wire shape of a batch answer.
type batchWire struct {
	Jobs []struct {
		Job
		Error *struct {
			Status  int               `json:"status"`
			Code    string            `json:"code"`
			Message string            `json:"message"`
			Fields  map[string]string `json:"fields"`
		} `json:"error"`
	} `json:"jobs"`
}

// SubmitBatch submits up to 1,000 jobs in one request. Items succeed or
// fail one by one (BatchItem.Err); retries behave as in Submit. When no item
// is accepted the error is an *APIError with code batch_rejected and the
// result still holds each item's error.
func (c *Client) SubmitBatch(ctx context.Context, reqs []JobRequest, opts ...SubmitOption) (*BatchResult, error) {
	var cfg submitConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.key == "" {
		cfg.key = NewIdempotencyKey()
	}
	cl, err := newCall(http.MethodPost, "/v1/jobs/batch", map[string]any{"jobs": reqs})
	if err != nil {
		return nil, err
	}
	cl.header.Set(IdempotencyKeyHeader, cfg.key)
	cl.idempotent = true
	resp, err := c.do(ctx, cl)
	var apiErr *APIError
	if err != nil && !(errors.As(err, &apiErr) && apiErr.Code == CodeBatchRejected) {
		return nil, err
	}
	var w batchWire
	if uerr := json.Unmarshal(resp.body, &w); uerr != nil {
		return nil, fmt.Errorf("ferry client: decode batch answer: %w", uerr)
	}
	out := &BatchResult{Items: make([]BatchItem, len(w.Jobs)), IdempotencyKey: cfg.key}
	for i, it := range w.Jobs {
		if it.Error != nil {
			out.Items[i].Err = &APIError{Status: it.Error.Status, Code: it.Error.Code, Message: it.Error.Message, Fields: it.Error.Fields}
			continue
		}
		job := it.Job
		out.Items[i] = BatchItem{Job: &job, Deduplicated: job.Deduplicated}
	}
	return out, err
}

// Get returns a job of the caller's tenant.
func (c *Client) Get(ctx context.Context, id string) (*Job, error) {
	if id == "" {
		return nil, errEmptyID
	}
	cl, _ := newCall(http.MethodGet, "/v1/jobs/"+pathEscape(id), nil)
	var job Job
	if _, err := c.decode(ctx, cl, &job); err != nil {
		return nil, err
	}
	return &job, nil
}

// ListOptions filter and page List and Jobs. Zero fields do not filter.
type ListOptions struct {
	Status Status
	Type   string
	Queue  string
	// Tags requires every tag given.
	Tags []string
	// Limit is the page size: 1 to 500, 0 for the API's 50.
	Limit int
	// Cursor is the NextCursor of the previous page.
	Cursor string
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	setIf(q, "status", string(o.Status))
	setIf(q, "type", o.Type)
	setIf(q, "queue", o.Queue)
	for _, t := range o.Tags {
		q.Add("tag", t)
	}
	setPage(q, o.Cursor, o.Limit)
	return q
}

func setIf(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

func setPage(q url.Values, cursor string, limit int) {
	setIf(q, "cursor", cursor)
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
}

// JobPage is one page of List, newest first.
type JobPage struct {
	Jobs []Job `json:"jobs"`
	// NextCursor is empty on the last page.
	NextCursor string `json:"next_cursor"`
}

// List returns one page of the tenant's jobs, newest first.
func (c *Client) List(ctx context.Context, opts ListOptions) (*JobPage, error) {
	cl, _ := newCall(http.MethodGet, "/v1/jobs", nil)
	cl.query = opts.query()
	var page JobPage
	if _, err := c.decode(ctx, cl, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Jobs iterates over every job matching opts, page after page (opts.Limit
// is the page size). An error ends the iteration after it is yielded.
func (c *Client) Jobs(ctx context.Context, opts ListOptions) iter.Seq2[Job, error] {
	return paginate(opts.Cursor, func(cursor string) ([]Job, string, error) {
		o := opts
		o.Cursor = cursor
		p, err := c.List(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return p.Jobs, p.NextCursor, nil
	})
}

// paginate turns a page function into an iterator over the cursor.
func paginate[T any](cursor string, page func(cursor string) ([]T, string, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			items, next, err := page(cursor)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" || next == cursor {
				return
			}
			cursor = next
		}
	}
}

// Cancel asks Ferry to cancel a job and returns the job as it was; the job
// turns cancelled once the cancellation is applied (Wait for it). A job
// that already finished answers an error matching ErrJobFinished.
func (c *Client) Cancel(ctx context.Context, id string) (*Job, error) {
	if id == "" {
		return nil, errEmptyID
	}
	cl, _ := newCall(http.MethodPost, "/v1/jobs/"+pathEscape(id)+"/cancel", nil)
	cl.idempotent = true // cancelling twice cancels once
	var out struct {
		Job Job `json:"job"`
	}
	if _, err := c.decode(ctx, cl, &out); err != nil {
		return nil, err
	}
	return &out.Job, nil
}
