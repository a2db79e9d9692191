package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"time"
)

// Schedule is a cron schedule as the API shows it (docs/schedules.md).
type Schedule struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
	Cron     string `json:"cron"`
	TimeZone string `json:"timezone"`
	// Job is the job template each fire submits.
	Job json.RawMessage `json:"job"`
	// Overlap is allow, skip or queue_one; Catchup is skip, one or all.
	Overlap      string `json:"overlap"`
	Catchup      string `json:"catchup"`
	CatchupLimit int    `json:"catchup_limit"`
	Paused       bool   `json:"paused"`
	// NextFireTimes are the upcoming fire times (none while paused).
	NextFireTimes []time.Time `json:"next_fire_times"`
	QueuedFireAt  *time.Time  `json:"queued_fire_at"`
	LastFireAt    *time.Time  `json:"last_fire_at"`
	LastJobID     string      `json:"last_job_id"`
	LastError     string      `json:"last_error"`
	Fired         int64       `json:"fired"`
	Skipped       int64       `json:"skipped"`
	CreatedAt     time.Time   `json:"created_at"`
	UpdatedAt     time.Time   `json:"updated_at"`
}

// ScheduleRequest is the body of CreateSchedule and UpdateSchedule. Nil
// fields are not sent: UpdateSchedule keeps their value, CreateSchedule
// takes the server's default (Name, Cron and Job are required there).
type ScheduleRequest struct {
	Name     *string `json:"name,omitempty"`
	Cron     *string `json:"cron,omitempty"`
	TimeZone *string `json:"timezone,omitempty"`
	// Job is the job template, a submission's JSON without run_at, delay
	// and idempotency_key (the schedule sets those).
	Job          json.RawMessage `json:"job,omitempty"`
	Overlap      *string         `json:"overlap,omitempty"`
	Catchup      *string         `json:"catchup,omitempty"`
	CatchupLimit *int            `json:"catchup_limit,omitempty"`
	Paused       *bool           `json:"paused,omitempty"`
}

// SchedulePage is one page of schedules, oldest first.
type SchedulePage struct {
	Schedules  []Schedule `json:"schedules"`
	NextCursor string     `json:"next_cursor"`
}

// schedulePath is the path of schedule id, with suffix.
func schedulePath(id, suffix string) string { return "/v1/schedules/" + pathEscape(id) + suffix }

// resourceCall runs method on path with body (nil for none) and decodes
// the answer into a T.
func resourceCall[T any](ctx context.Context, c *Client, method, path string, body any, idempotent bool) (*T, error) {
	cl, err := newCall(method, path, body)
	if err != nil {
		return nil, err
	}
	cl.idempotent = idempotent
	var out T
	if _, err := c.decode(ctx, cl, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateSchedule creates a schedule. It is not retried after a network
// error (a second schedule would be refused as schedule_name_taken).
func (c *Client) CreateSchedule(ctx context.Context, req ScheduleRequest) (*Schedule, error) {
	return resourceCall[Schedule](ctx, c, http.MethodPost, "/v1/schedules", req, false)
}

// GetSchedule returns a schedule of the tenant.
func (c *Client) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	if id == "" {
		return nil, errEmptyID
	}
	return resourceCall[Schedule](ctx, c, http.MethodGet, schedulePath(id, ""), nil, true)
}

// UpdateSchedule changes the fields req sets. Setting them again sets the
// same values, so it is retried after a network error.
func (c *Client) UpdateSchedule(ctx context.Context, id string, req ScheduleRequest) (*Schedule, error) {
	if id == "" {
		return nil, errEmptyID
	}
	return resourceCall[Schedule](ctx, c, http.MethodPatch, schedulePath(id, ""), req, true)
}

// DeleteSchedule deletes a schedule; the jobs it created are not touched.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	if id == "" {
		return errEmptyID
	}
	_, err := resourceCall[json.RawMessage](ctx, c, http.MethodDelete, schedulePath(id, ""), nil, true)
	return err
}

// PauseSchedule stops a schedule's fires; fire times that pass while it is
// paused are not caught up.
func (c *Client) PauseSchedule(ctx context.Context, id string) (*Schedule, error) {
	if id == "" {
		return nil, errEmptyID
	}
	return resourceCall[Schedule](ctx, c, http.MethodPost, schedulePath(id, "/pause"), nil, true)
}

// ResumeSchedule makes a schedule fire again from its next fire time
// after now.
func (c *Client) ResumeSchedule(ctx context.Context, id string) (*Schedule, error) {
	if id == "" {
		return nil, errEmptyID
	}
	return resourceCall[Schedule](ctx, c, http.MethodPost, schedulePath(id, "/resume"), nil, true)
}

// TriggerSchedule submits the schedule's job now and returns the job. It is
// not retried after a network error (each trigger is a new job).
func (c *Client) TriggerSchedule(ctx context.Context, id string) (*Job, error) {
	if id == "" {
		return nil, errEmptyID
	}
	return resourceCall[Job](ctx, c, http.MethodPost, schedulePath(id, "/trigger"), nil, false)
}

// ListSchedules returns one page of the tenant's schedules, oldest first.
func (c *Client) ListSchedules(ctx context.Context, opts PageOptions) (*SchedulePage, error) {
	cl, _ := newCall(http.MethodGet, "/v1/schedules", nil)
	cl.query = opts.query()
	var page SchedulePage
	if _, err := c.decode(ctx, cl, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Schedules iterates over every schedule, page after page.
func (c *Client) Schedules(ctx context.Context, opts PageOptions) iter.Seq2[Schedule, error] {
	return paginate(opts.Cursor, func(cursor string) ([]Schedule, string, error) {
		o := opts
		o.Cursor = cursor
		p, err := c.ListSchedules(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return p.Schedules, p.NextCursor, nil
	})
}
