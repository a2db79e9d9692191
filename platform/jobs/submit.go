// Submission validation: Validate turns a client's request into the job
// specification that travels in the enqueued event. It is pure: the clock
// and the limits are passed in.

package jobs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
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
	// Concurrency caps the jobs of the tenant with the same key running at
	// once (concurrency.go).
	Concurrency *ConcurrencyRequest `json:"concurrency,omitempty"`
	// IdempotencyKey is the per-item key of a batch (a single submission
	// uses the Idempotency-Key header).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Unique makes the job unique by key while it is in a state.
	Unique *UniqueRequest `json:"unique,omitempty"`
}

// UniqueRequest is the unique key of a submission: while the tenant's job
// holding Key is in the While state (and for at most TTL), another
// submission with Key answers with that job.
type UniqueRequest struct {
	Key string `json:"key"`
	// While is "queued", "active" or "until_done" (the default).
	While *string `json:"while,omitempty"`
	// TTL bounds how long the key holds, from the submission; defaults to
	// DefaultUniqueTTL.
	TTL *string `json:"ttl,omitempty"`
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
	// MaxPayloadBytes bounds the payload's size as produced in the
	// enqueued event (compact, '<', '>' and '&' escaped as \u003c …), not
	// as sent: a payload grows up to 6× once escaped.
	MaxPayloadBytes int
	// MaxDelay bounds how far ahead run_at, delay and the retry backoff
	// may reach (0: MaxAhead). It stays below the topics' retention: after
	// losing Redis the scheduler rebuilds delayed jobs only from what
	// Kafka still holds.
	MaxDelay time.Duration
	// MaxAttemptsByType is the default max_attempts of jobs of a type that
	// do not set their own; other types default to DefaultMaxAttempts.
	MaxAttemptsByType map[string]int
}

// Limits of docs/design.md §3 that are not configurable (names.go has the
// defaults and the bounds of priority and attempts).
const (
	MaxTags           = 32
	MaxTagLen         = 64
	MaxTimeout        = 24 * time.Hour
	MaxAhead          = 365 * 24 * time.Hour
	MaxPast           = time.Hour
	MaxIdempotencyKey = 255
	MaxUniqueKey      = 255
	DefaultUniqueTTL  = 24 * time.Hour
	MaxUniqueTTL      = 30 * 24 * time.Hour
)

// Accepted is a valid submission.
type Accepted struct {
	Spec schema.JobSpec
	// RunAt is when the first attempt may start; never before now.
	RunAt time.Time
	// Unique is the job's unique key, nil without one.
	Unique *schema.Unique
}

// Invalid is a rejected submission.
type Invalid struct {
	// TooLarge is set when the payload exceeds the limit (413).
	TooLarge bool
	// Code is the specific error code when every bad field has the same
	// one (payload_unstorable, run_at_too_far); "" means validation_failed.
	Code string
	// Fields maps each bad field to what is wrong with it (422).
	Fields map[string]string
}

// Specific error codes of field errors.
const (
	CodePayloadUnstorable = "payload_unstorable"
	CodeRunAtTooFar       = "run_at_too_far"
)

func (e *Invalid) Error() string { return fmt.Sprintf("invalid submission: %v", e.Fields) }

// Validate checks req at now, applying defaults. It returns *Invalid for a
// bad request. Every string it accepts is storable text and the payload is
// storable by Postgres jsonb (schema.CheckText, schema.CheckJSON): a record
// no projection can store would stop every tenant behind it.
func Validate(req Request, now time.Time, lim Limits) (Accepted, error) {
	v := validation{bad: map[string]string{}, codes: map[string]string{}, lim: lim, now: now}
	if lim.MaxDelay <= 0 {
		v.lim.MaxDelay = MaxAhead
	}
	spec := schema.JobSpec{Type: req.Type, Queue: DefaultQueue, Priority: DefaultPriority, MaxAttempts: DefaultMaxAttempts, Pool: schema.PoolShort}
	if n, ok := lim.MaxAttemptsByType[req.Type]; ok {
		spec.MaxAttempts = n
	}
	v.names(req, &spec)
	v.payload(req.Payload, &spec)
	runAt := v.runAt(req)
	v.limits(req, &spec, runAt)
	v.tags(req.Tags, &spec)
	v.backoff(req.Backoff, &spec)
	v.concurrency(req.Concurrency, &spec)
	unique := v.unique(req.Unique)
	if msg := CheckIdempotencyKey(req.IdempotencyKey); msg != "" {
		v.bad["idempotency_key"] = msg
	}
	if len(v.bad) > 0 {
		return Accepted{}, v.invalid()
	}
	return Accepted{Spec: spec, RunAt: runAt.UTC(), Unique: unique}, nil
}

// validation collects the field errors of one submission.
type validation struct {
	bad      map[string]string
	codes    map[string]string // field → specific error code
	tooLarge bool
	lim      Limits
	now      time.Time
}

func (v *validation) invalid() *Invalid {
	inv := &Invalid{TooLarge: v.tooLarge && len(v.bad) == 1, Fields: v.bad}
	for field := range v.bad {
		code := v.codes[field]
		if code == "" || (inv.Code != "" && inv.Code != code) {
			inv.Code = ""
			break
		}
		inv.Code = code
	}
	return inv
}

// text records a field error when s is not storable text; it reports
// whether s is.
func (v *validation) text(field, s string) bool {
	if err := schema.CheckText(s); err != nil {
		v.bad[field] = schema.FieldMessage(err)
		return false
	}
	return true
}

// names checks type, queue, priority and pool.
func (v *validation) names(req Request, spec *schema.JobSpec) {
	switch {
	case req.Type == "":
		v.bad["type"] = "is required"
	case !v.text("type", req.Type):
	case !ValidType(req.Type):
		v.bad["type"] = typeRule
	}
	if req.Queue != nil {
		spec.Queue = *req.Queue
		if v.text("queue", spec.Queue) && !ValidQueue(spec.Queue) {
			v.bad["queue"] = queueRule
		}
	}
	if req.Priority != nil {
		spec.Priority = *req.Priority
		if !ValidPriority(spec.Priority) {
			v.bad["priority"] = fmt.Sprintf("must be between %d (most urgent) and %d", MinPriority, MaxPriority)
		}
	}
	if req.Pool != nil {
		spec.Pool = *req.Pool
		if v.text("pool", spec.Pool) && spec.Pool != schema.PoolShort && spec.Pool != schema.PoolLong {
			v.bad["pool"] = `must be "short" or "long"`
		}
	}
}

// payload checks the payload and stores it as it will be produced; the
// size limit applies to those bytes (payload.go).
func (v *validation) payload(raw json.RawMessage, spec *schema.JobSpec) {
	enc, p := encodePayload(raw, v.lim.MaxPayloadBytes)
	if p != nil {
		v.bad[p.field], v.tooLarge = p.message, p.tooLarge
		if p.code != "" {
			v.codes[p.field] = p.code
		}
		return
	}
	spec.Payload = enc
}

// runAt checks run_at and delay and returns when the first attempt may
// start.
func (v *validation) runAt(req Request) time.Time {
	now, maxAhead := v.now, v.lim.MaxDelay
	// Made only for a refusal: every submission passes here.
	tooFar := func() string {
		return fmt.Sprintf("is more than %s ahead, the longest delay this deployment accepts (FERRY_API_MAX_DELAY, below the topics' retention)", maxAhead)
	}
	switch {
	case req.RunAt != nil && req.Delay != nil:
		v.bad["run_at"] = "give run_at or delay, not both"
	case req.RunAt != nil:
		if !v.text("run_at", *req.RunAt) {
			return now
		}
		t, err := time.Parse(time.RFC3339Nano, *req.RunAt)
		switch {
		case err != nil:
			v.bad["run_at"] = "must be an RFC 3339 time such as 2026-01-02T15:04:05Z"
		case t.Before(now.Add(-MaxPast)):
			v.bad["run_at"] = "is more than 1h in the past"
		case t.After(now.Add(maxAhead)):
			v.bad["run_at"], v.codes["run_at"] = tooFar(), CodeRunAtTooFar
		case t.After(now):
			return t
		}
	case req.Delay != nil:
		if !v.text("delay", *req.Delay) {
			return now
		}
		d, err := time.ParseDuration(*req.Delay)
		switch {
		case err != nil:
			v.bad["delay"] = `must be a duration such as "500ms", "2s" or "1h30m"`
		case d < 0:
			v.bad["delay"] = "must not be negative"
		case d > maxAhead:
			v.bad["delay"], v.codes["delay"] = tooFar(), CodeRunAtTooFar
		default:
			return now.Add(d)
		}
	}
	return now
}

// limits checks max_attempts, timeout and not_after.
func (v *validation) limits(req Request, spec *schema.JobSpec, runAt time.Time) {
	if req.MaxAttempts != nil {
		spec.MaxAttempts = *req.MaxAttempts
		if !ValidMaxAttempts(spec.MaxAttempts) {
			v.bad["max_attempts"] = maxAttemptsRule
		}
	}
	if req.Timeout != nil && v.text("timeout", *req.Timeout) {
		d, err := time.ParseDuration(*req.Timeout)
		switch {
		case err != nil:
			v.bad["timeout"] = `must be a duration such as "30s"`
		case d <= 0:
			v.bad["timeout"] = "must be positive"
		case d > MaxTimeout:
			v.bad["timeout"] = "must be at most 24h"
		default:
			spec.Timeout = schema.Duration(d)
		}
	}
	if req.NotAfter != nil && v.text("not_after", *req.NotAfter) {
		t, err := time.Parse(time.RFC3339Nano, *req.NotAfter)
		switch {
		case err != nil:
			v.bad["not_after"] = "must be an RFC 3339 time"
		case !t.After(v.now):
			v.bad["not_after"] = "must be in the future"
		case !t.After(runAt):
			v.bad["not_after"] = "must be after the job's run_at"
		default:
			u := t.UTC()
			spec.NotAfter = &u
		}
	}
}

func (v *validation) tags(tags []string, spec *schema.JobSpec) {
	if len(tags) > MaxTags {
		v.bad["tags"] = fmt.Sprintf("at most %d tags", MaxTags)
	}
	for i, tag := range tags {
		// The field's name is made only for a refusal: most jobs' tags pass.
		if tag != "" && len(tag) <= MaxTagLen && schema.CheckText(tag) == nil {
			continue
		}
		field := "tags[" + strconv.Itoa(i) + "]"
		if v.text(field, tag) {
			v.bad[field] = fmt.Sprintf("must hold 1 to %d characters", MaxTagLen)
		}
	}
	if len(tags) > 0 {
		spec.Tags = append([]string(nil), tags...)
	}
}

func (v *validation) backoff(req *BackoffRequest, spec *schema.JobSpec) {
	if req == nil {
		return
	}
	b := &schema.Backoff{}
	parse := func(name string, s *string) schema.Duration {
		if s == nil || !v.text("backoff."+name, *s) {
			return 0
		}
		d, err := time.ParseDuration(*s)
		if err != nil || d <= 0 || d > v.lim.MaxDelay {
			v.bad["backoff."+name] = fmt.Sprintf(`must be a positive duration such as "1s", at most %s`, v.lim.MaxDelay)
			return 0
		}
		return schema.Duration(d)
	}
	b.Base, b.Max = parse("base", req.Base), parse("max", req.Max)
	if b.Base > 0 && b.Max > 0 && b.Max < b.Base {
		v.bad["backoff.max"] = "must not be less than backoff.base"
	}
	if j := req.Jitter; j != nil {
		if *j < 0 || *j > 1 {
			v.bad["backoff.jitter"] = "must be between 0 and 1"
		}
		b.Jitter = j
	}
	if b.Base > 0 || b.Max > 0 || b.Jitter != nil {
		spec.Backoff = b
	}
}

// unique checks the unique key and returns it with its defaults applied.
func (v *validation) unique(req *UniqueRequest) *schema.Unique {
	if req == nil {
		return nil
	}
	u := &schema.Unique{Key: req.Key, While: schema.UniqueUntilDone}
	switch {
	case req.Key == "":
		v.bad["unique.key"] = "is required"
	case !v.text("unique.key", req.Key):
	case len(req.Key) > MaxUniqueKey:
		v.bad["unique.key"] = fmt.Sprintf("must be at most %d characters", MaxUniqueKey)
	}
	if req.While != nil {
		switch u.While = *req.While; u.While {
		case schema.UniqueQueued, schema.UniqueActive, schema.UniqueUntilDone:
		default:
			v.bad["unique.while"] = `must be "queued", "active" or "until_done"`
		}
	}
	ttl := DefaultUniqueTTL
	if req.TTL != nil && v.text("unique.ttl", *req.TTL) {
		d, err := time.ParseDuration(*req.TTL)
		if err != nil || d < time.Second || d > MaxUniqueTTL {
			v.bad["unique.ttl"] = fmt.Sprintf(`must be a duration such as "1h", between 1s and %s`, MaxUniqueTTL)
		}
		ttl = d
	}
	u.Until = v.now.Add(ttl).UTC()
	return u
}

// Hash returns the idempotency hash of req: SHA-256 over its canonical JSON
// (payload object keys sorted, insignificant whitespace dropped), without
// the idempotency key itself. Equal for requests that mean the same thing,
// whatever their formatting. Only a submission with an Idempotency-Key
// needs it (it re-encodes the payload), so Validate does not compute it.
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
