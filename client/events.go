package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// EventType is a lifecycle event name.
type EventType string

// Lifecycle events, and the control messages of a stream.
const (
	EventEnqueued  EventType = "enqueued"
	EventStarted   EventType = "started"
	EventProgress  EventType = "progress"
	EventCompleted EventType = "completed"
	EventFailed    EventType = "failed"
	EventDLQ       EventType = "dlq"
	EventCancelled EventType = "cancelled"
	// EventReset says the resume position was outside the retention
	// window: events were missed; re-read what you need from the REST API.
	// The stream continues live.
	EventReset EventType = "reset"
)

// Final says no event of the job follows (a failed attempt is not final:
// a retry or a dlq follows it).
func (t EventType) Final() bool {
	return t == EventCompleted || t == EventDLQ || t == EventCancelled
}

// Event is one message of an event stream.
type Event struct {
	// Seq is the event's position in Ferry's log (the SSE id); the client
	// resumes after the last Seq it yielded.
	Seq int64 `json:"-"`
	// Type is the lifecycle event, or EventReset.
	Type EventType `json:"type"`
	// ID is the CloudEvents id: unique, use it to de-duplicate.
	ID       string    `json:"id"`
	Time     time.Time `json:"time"`
	JobID    string    `json:"job_id"`
	TenantID string    `json:"tenant_id"`
	Attempt  int       `json:"attempt"`
	// Data is the event's payload as on the Kafka topic ferry.jobs.<type>.
	Data json.RawMessage `json:"data"`
	// Reason explains a reset.
	Reason string `json:"reason,omitempty"`
}

// EventFilter filters the tenant stream; a job must match one value of
// every field given.
type EventFilter struct {
	Types  []string
	Queues []string
	Tags   []string
	Events []EventType
}

// StreamOptions configure an event stream.
type StreamOptions struct {
	// LastEventID resumes after this Seq; nil starts the job stream at the
	// job's first event and the tenant stream live. A pointer to 0 replays
	// everything retained.
	LastEventID *int64
}

// JobEvents streams the events of one job: its history, then live events,
// ending after its final event (completed, dlq or cancelled). A dropped
// connection is resumed with Last-Event-ID: no event is lost or repeated.
// An error (an API error such as ErrNotFound, or reconnects that keep
// failing) is yielded last.
func (c *Client) JobEvents(ctx context.Context, jobID string, opts *StreamOptions) iter.Seq2[Event, error] {
	return c.stream(ctx, "/v1/jobs/"+pathEscape(jobID)+"/events", nil, true, opts)
}

// Events streams the events of every job of the tenant, matching f (nil:
// all), until ctx ends, resuming after dropped connections like JobEvents.
func (c *Client) Events(ctx context.Context, f *EventFilter, opts *StreamOptions) iter.Seq2[Event, error] {
	q := url.Values{}
	if f != nil {
		setList(q, "type", f.Types)
		setList(q, "queue", f.Queues)
		setList(q, "tag", f.Tags)
		for _, e := range f.Events {
			q.Add("event", string(e))
		}
	}
	return c.stream(ctx, "/v1/events", q, false, opts)
}

func setList(q url.Values, k string, vs []string) {
	for _, v := range vs {
		q.Add(k, v)
	}
}

// streamState is what survives a reconnect.
type streamState struct {
	lastID  int64
	hasLast bool
	done    bool          // the job's final event was seen
	retry   time.Duration // the server's retry: field
}

// stream opens path and reconnects until done, ctx ends or connecting fails
// RetryPolicy.MaxAttempts times in a row.
func (c *Client) stream(ctx context.Context, path string, q url.Values, job bool, opts *StreamOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		st := &streamState{}
		if opts != nil && opts.LastEventID != nil {
			st.lastID, st.hasLast = *opts.LastEventID, true
		}
		failures := 0
		for {
			progressed, stop, err := c.connect(ctx, path, q, job, st, yield)
			if stop || st.done {
				return
			}
			if ctx.Err() != nil {
				yield(Event{}, fmt.Errorf("ferry client: %s: %w", path, ctx.Err()))
				return
			}
			if progressed {
				failures = 0
			}
			failures++
			wait, retry := c.reconnectDelay(err, failures, st)
			if !retry {
				yield(Event{}, err)
				return
			}
			if serr := sleep(ctx, wait); serr != nil {
				yield(Event{}, serr)
				return
			}
		}
	}
}

// reconnectDelay decides whether a stream that ended with err (nil: the
// connection closed) reconnects, and after how long.
func (c *Client) reconnectDelay(err error, failures int, st *streamState) (time.Duration, bool) {
	if failures > c.retry.MaxAttempts {
		if err == nil {
			err = errors.New("ferry client: event stream keeps closing")
		}
		return 0, false
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		if !retryableStatus(&call{idempotent: true}, &response{status: apiErr.Status, body: apiErr.Body}) {
			return 0, false
		}
		if apiErr.RetryAfter > 0 {
			return min(apiErr.RetryAfter, c.retry.MaxRetryAfter), true
		}
	}
	if failures == 1 && err == nil && st.retry > 0 {
		return st.retry, true // a clean drop: the server's retry: delay
	}
	return c.retry.Backoff(failures), true
}

// connect runs one connection of a stream. progressed says it yielded or
// opened fine; stop says the consumer or the stream is done (nothing to
// reconnect for).
func (c *Client) connect(ctx context.Context, path string, q url.Values, job bool, st *streamState,
	yield func(Event, error) bool) (progressed, stop bool, err error) {
	cl, _ := newCall(http.MethodGet, path, nil)
	cl.query = q
	req, err := c.request(ctx, cl)
	if err != nil {
		return false, false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if st.hasLast {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(st.lastID, 10))
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return false, false, c.netErr(ctx, cl, err)
	}
	defer res.Body.Close()
	switch {
	case res.StatusCode == http.StatusNoContent:
		st.done = true // the job's final event was already delivered
		return true, true, nil
	case res.StatusCode >= 400:
		b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
		return false, false, parseError(&response{status: res.StatusCode, header: res.Header, body: b})
	case res.StatusCode != http.StatusOK:
		return false, false, fmt.Errorf("ferry client: %s answered %d", path, res.StatusCode)
	}
	return c.readStream(res.Body, job, st, yield)
}

// readStream yields the events of one open stream.
func (c *Client) readStream(body io.Reader, job bool, st *streamState, yield func(Event, error) bool) (bool, bool, error) {
	p := newSSEParser(body)
	for {
		m, err := p.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return true, false, err
		}
		if m.retry > 0 {
			st.retry = m.retry
		}
		ev, ok, perr := decodeMessage(m)
		if perr != nil || !ok {
			if m.event == "overflow" { // disconnected for being slow: resume
				return true, false, nil
			}
			continue
		}
		st.lastID, st.hasLast = ev.Seq, true
		if !yield(ev, nil) {
			return true, true, nil
		}
		if job && ev.Type.Final() {
			st.done = true
			return true, true, nil
		}
	}
}

// decodeMessage turns an SSE message into an Event; ok is false for
// messages without an id or data (comments, retry-only messages).
func decodeMessage(m sseMessage) (Event, bool, error) {
	if m.id == "" || m.data == "" {
		return Event{}, false, nil
	}
	seq, err := strconv.ParseInt(m.id, 10, 64)
	if err != nil {
		return Event{}, false, fmt.Errorf("ferry client: event id %q: %w", m.id, err)
	}
	switch EventType(m.event) {
	case "overflow":
		return Event{}, false, nil
	case EventReset:
		var ctl struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal([]byte(m.data), &ctl)
		return Event{Seq: seq, Type: EventReset, Reason: ctl.Reason}, true, nil
	}
	var ev Event
	if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
		return Event{}, false, fmt.Errorf("ferry client: event %d: %w", seq, err)
	}
	ev.Seq = seq
	return ev, true, nil
}

// maxSSELine bounds one line of a stream, so a broken server cannot make
// the client buffer without end. Events carry at most a job's payload.
const maxSSELine = 32 << 20

// sseMessage is one dispatched Server-Sent Events message.
type sseMessage struct {
	id, event, data string
	retry           time.Duration
}

// sseParser reads text/event-stream (the WHATWG rules the stream needs:
// fields, comments, multi-line data, CR/LF/CRLF line ends).
type sseParser struct {
	r *bufio.Reader
	// afterCR says the last line ended with CR: a LF right after it
	// belongs to that line end. (Peeking instead would block a message
	// ending in CR until the server sends more.)
	afterCR bool
}

func newSSEParser(r io.Reader) *sseParser { return &sseParser{r: bufio.NewReaderSize(r, 64<<10)} }

// next returns the next message; io.EOF at the end of the stream (a
// message not terminated by a blank line is dropped, as the spec says).
func (p *sseParser) next() (sseMessage, error) {
	var m sseMessage
	var data []string
	seen := false
	for {
		line, err := p.line()
		if err != nil {
			return sseMessage{}, err
		}
		if line == "" {
			if seen {
				m.data = strings.Join(data, "\n")
				return m, nil
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		seen = true
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			if !strings.ContainsRune(value, 0) {
				m.id = value
			}
		case "event":
			m.event = value
		case "data":
			data = append(data, value)
		case "retry":
			if n, err := strconv.ParseInt(value, 10, 64); err == nil && n >= 0 {
				m.retry = time.Duration(n) * time.Millisecond
			}
		}
	}
}

// line reads one line without its ending (LF, CRLF or CR).
func (p *sseParser) line() (string, error) {
	var b strings.Builder
	for {
		c, err := p.r.ReadByte()
		if err != nil {
			return "", err
		}
		afterCR := p.afterCR
		p.afterCR = false
		switch {
		case c == '\n' && afterCR && b.Len() == 0:
			continue // the LF of a CRLF
		case c == '\n':
			return b.String(), nil
		case c == '\r':
			p.afterCR = true
			return b.String(), nil
		}
		if b.Len() >= maxSSELine {
			return "", fmt.Errorf("ferry client: event stream line over %d bytes", maxSSELine)
		}
		b.WriteByte(c)
	}
}
