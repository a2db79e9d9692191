// Package submit validates job submissions (DESIGN.md §3) and turns them
// into the job specification that travels in the enqueued event. It is pure:
// the clock and the limits are passed in.
package submit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// Request is one job submission as clients send it. Optional fields are
// pointers so "absent" and "zero" can be told apart; times and durations are
// strings so a malformed one is a field error (422), not a JSON error (400).
type Request struct {
	Type        string          `json:"type"`
	Queue       *string         `json:"queue,omitempty"`
	Priority    *int            `json:"priority,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	RunAt       *string         `json:"run_at,omitempty"`
	Delay       *string         `json:"delay,omitempty"`
	MaxAttempts *int            `json:"max_attempts,omitempty"`
	Timeout     *string         `json:"timeout,omitempty"`
	NotAfter    *string         `json:"not_after,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Pool        *string         `json:"pool,omitempty"`
	Backoff     *BackoffRequest `json:"backoff,omitempty"`
	// IdempotencyKey is the per-item key of a batch (a single submission
	// uses the Idempotency-Key header).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// BackoffRequest overrides the retry backoff.
type BackoffRequest struct {
	Base *string `json:"base,omitempty"`
	Max  *string `json:"max,omitempty"`
	// Jitter is the relative spread of each delay, 0 to 1 (0: exact delays).
	Jitter *float64 `json:"jitter,omitempty"`
}

// Limits bound submissions and hold the operator's defaults.
type Limits struct {
	// MaxPayloadBytes bounds the payload's encoded size.
	MaxPayloadBytes int
	// MaxAttemptsByType is the default max_attempts of jobs of a type that
	// do not set their own; other types default to DefaultMaxAttempts.
	MaxAttemptsByType map[string]int
}

// Limits of DESIGN.md §3 that are not configurable.
const (
	DefaultQueue       = "default"
	DefaultPriority    = 5
	DefaultMaxAttempts = 5
	MaxMaxAttempts     = 100
	MaxTags            = 32
	MaxTagLen          = 64
	MaxTimeout         = 24 * time.Hour
	MaxAhead           = 365 * 24 * time.Hour
	MaxPast            = time.Hour
	MaxIdempotencyKey  = 255
)

var (
	typePattern  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.:/-]{0,127}$`)
	queuePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
)

// Accepted is a valid submission.
type Accepted struct {
	Spec schema.JobSpec
	// RunAt is when the first attempt may start; never before now.
	RunAt time.Time
	// Hash identifies the request for idempotency: equal for requests that
	// mean the same thing, whatever their formatting.
	Hash string
}

// Invalid is a rejected submission.
type Invalid struct {
	// TooLarge is set when the payload exceeds the limit (413).
	TooLarge bool
	// Fields maps each bad field to what is wrong with it (422).
	Fields map[string]string
}

func (e *Invalid) Error() string { return fmt.Sprintf("invalid submission: %v", e.Fields) }

// Validate checks req at now, applying defaults. It returns *Invalid for a
// bad request.
func Validate(req Request, now time.Time, lim Limits) (Accepted, error) {
	bad := map[string]string{}
	spec := schema.JobSpec{Type: req.Type, Queue: DefaultQueue, Priority: DefaultPriority, MaxAttempts: DefaultMaxAttempts, Pool: schema.PoolShort}
	if n, ok := lim.MaxAttemptsByType[req.Type]; ok {
		spec.MaxAttempts = n
	}
	switch {
	case req.Type == "":
		bad["type"] = "is required"
	case !typePattern.MatchString(req.Type):
		bad["type"] = "must start with a letter and hold at most 128 letters, digits, '_', '.', ':', '/' or '-'"
	}
	if req.Queue != nil {
		spec.Queue = *req.Queue
		if !queuePattern.MatchString(spec.Queue) {
			bad["queue"] = "must hold 1 to 64 lower-case letters, digits, '_', '.' or '-', starting with a letter or digit"
		}
	}
	if req.Priority != nil {
		spec.Priority = *req.Priority
		if spec.Priority < 0 || spec.Priority > 9 {
			bad["priority"] = "must be between 0 (most urgent) and 9"
		}
	}
	tooLarge := false
	if len(req.Payload) > 0 && !bytes.Equal(bytes.TrimSpace(req.Payload), []byte("null")) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, req.Payload); err != nil {
			bad["payload"] = "must be JSON"
		} else if lim.MaxPayloadBytes > 0 && buf.Len() > lim.MaxPayloadBytes {
			tooLarge = true
			bad["payload"] = fmt.Sprintf("must be at most %d bytes", lim.MaxPayloadBytes)
		} else {
			spec.Payload = buf.Bytes()
		}
	}
	runAt := now
	switch {
	case req.RunAt != nil && req.Delay != nil:
		bad["run_at"] = "give run_at or delay, not both"
	case req.RunAt != nil:
		t, err := time.Parse(time.RFC3339Nano, *req.RunAt)
		switch {
		case err != nil:
			bad["run_at"] = "must be an RFC 3339 time such as 2026-01-02T15:04:05Z"
		case t.Before(now.Add(-MaxPast)):
			bad["run_at"] = "is more than 1h in the past"
		case t.After(now.Add(MaxAhead)):
			bad["run_at"] = "is more than 1 year ahead"
		case t.After(now):
			runAt = t
		}
	case req.Delay != nil:
		d, err := time.ParseDuration(*req.Delay)
		switch {
		case err != nil:
			bad["delay"] = `must be a duration such as "500ms", "2s" or "1h30m"`
		case d < 0:
			bad["delay"] = "must not be negative"
		case d > MaxAhead:
			bad["delay"] = "must be at most 1 year"
		default:
			runAt = now.Add(d)
		}
	}
	if req.MaxAttempts != nil {
		spec.MaxAttempts = *req.MaxAttempts
		if spec.MaxAttempts < 1 || spec.MaxAttempts > MaxMaxAttempts {
			bad["max_attempts"] = fmt.Sprintf("must be between 1 and %d", MaxMaxAttempts)
		}
	}
	if req.Timeout != nil {
		d, err := time.ParseDuration(*req.Timeout)
		switch {
		case err != nil:
			bad["timeout"] = `must be a duration such as "30s"`
		case d <= 0:
			bad["timeout"] = "must be positive"
		case d > MaxTimeout:
			bad["timeout"] = "must be at most 24h"
		default:
			spec.Timeout = schema.Duration(d)
		}
	}
	if req.NotAfter != nil {
		t, err := time.Parse(time.RFC3339Nano, *req.NotAfter)
		switch {
		case err != nil:
			bad["not_after"] = "must be an RFC 3339 time"
		case !t.After(now):
			bad["not_after"] = "must be in the future"
		case !t.After(runAt):
			bad["not_after"] = "must be after the job's run_at"
		default:
			u := t.UTC()
			spec.NotAfter = &u
		}
	}
	if len(req.Tags) > MaxTags {
		bad["tags"] = fmt.Sprintf("at most %d tags", MaxTags)
	}
	for i, tag := range req.Tags {
		if tag == "" || len(tag) > MaxTagLen {
			bad[fmt.Sprintf("tags[%d]", i)] = fmt.Sprintf("must hold 1 to %d characters", MaxTagLen)
		}
	}
	if len(req.Tags) > 0 {
		spec.Tags = append([]string(nil), req.Tags...)
	}
	if req.Pool != nil {
		spec.Pool = *req.Pool
		if spec.Pool != schema.PoolShort && spec.Pool != schema.PoolLong {
			bad["pool"] = `must be "short" or "long"`
		}
	}
	if req.Backoff != nil {
		b := &schema.Backoff{}
		parse := func(name string, s *string) schema.Duration {
			if s == nil {
				return 0
			}
			d, err := time.ParseDuration(*s)
			if err != nil || d <= 0 || d > MaxAhead {
				bad["backoff."+name] = `must be a positive duration such as "1s"`
				return 0
			}
			return schema.Duration(d)
		}
		b.Base, b.Max = parse("base", req.Backoff.Base), parse("max", req.Backoff.Max)
		if b.Base > 0 && b.Max > 0 && b.Max < b.Base {
			bad["backoff.max"] = "must not be less than backoff.base"
		}
		if j := req.Backoff.Jitter; j != nil {
			if *j < 0 || *j > 1 {
				bad["backoff.jitter"] = "must be between 0 and 1"
			}
			b.Jitter = j
		}
		if b.Base > 0 || b.Max > 0 || b.Jitter != nil {
			spec.Backoff = b
		}
	}
	if len(req.IdempotencyKey) > MaxIdempotencyKey {
		bad["idempotency_key"] = fmt.Sprintf("must be at most %d characters", MaxIdempotencyKey)
	}
	if len(bad) > 0 {
		return Accepted{}, &Invalid{TooLarge: tooLarge && len(bad) == 1, Fields: bad}
	}
	return Accepted{Spec: spec, RunAt: runAt.UTC(), Hash: Hash(req)}, nil
}

// Hash returns the idempotency hash of req: SHA-256 over its canonical JSON
// (payload object keys sorted, insignificant whitespace dropped), without
// the idempotency key itself.
func Hash(req Request) string {
	req.IdempotencyKey = ""
	if len(req.Payload) > 0 {
		dec := json.NewDecoder(bytes.NewReader(req.Payload))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err == nil {
			if b, err := json.Marshal(v); err == nil {
				req.Payload = b
			}
		}
	}
	b, _ := json.Marshal(req)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
