package schema

// The fast path of decodeData.
//
// encoding/json decodes a lifecycle event by reflection after a full
// validity pass; on the hot records that was most of the CPU every consumer
// spent per job. fastDecode reads the shape json.Marshal writes for the job
// events (the payload types below) straight into their structs, and gives up
// (returns false) at the first thing outside a deliberately narrow subset:
// an unknown or differently cased key, a key seen twice, null, an escape
// in a key, time or duration, a number that is not a plain integer where an
// int goes, a malformed token. decodeAs then decodes the value with
// encoding/json from scratch, so on everything the fast path does not take,
// results and errors are encoding/json's own. On everything it takes, the
// result is what encoding/json gives: the subset is where the two cannot
// differ (FuzzFastDecodeMatchesJSON holds the two to that), and values with
// their own JSON methods (time.Time, Duration) are decoded by those methods,
// as encoding/json does.

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// fastDecode decodes value into *p when p points to a type with a fast
// decoder and value is in the subset it takes; false leaves *p partly
// written and the caller must start over.
func fastDecode(p any, value []byte) bool {
	s := scanner{b: value}
	var ok bool
	switch v := p.(type) {
	case *Enqueued:
		ok = s.enqueued(v)
	case *Dispatch:
		ok = s.dispatch(v)
	case *Started:
		ok = s.started(v)
	case *Progress:
		ok = s.progress(v)
	case *Completed:
		ok = s.completed(v)
	case *Failed:
		ok = s.failed(v)
	case *Cancelled:
		ok = s.cancelled(v)
	case *DeadLettered:
		ok = s.deadLettered(v)
	case *JobSpec:
		ok = s.jobSpec(v)
	case *[]Attempt:
		ok = s.history(v)
	default:
		return false
	}
	return ok && s.end()
}

// UnmarshalSpec decodes a job's spec as json.Unmarshal does, through the
// fast path when the JSON is in its subset. The scheduler keeps each job's
// spec in Redis as JSON and decodes it for every dispatch and every failed
// attempt it decides on, where encoding/json's reflection was ~2 % of
// ferry's CPU at full load (docs/performance.md, Round 19).
func UnmarshalSpec(value []byte) (JobSpec, error) { return decodeValue[JobSpec](value) }

// UnmarshalHistory decodes an attempt history as json.Unmarshal does,
// through the fast path when the JSON is in its subset (UnmarshalSpec).
func UnmarshalHistory(value []byte) ([]Attempt, error) { return decodeValue[[]Attempt](value) }

// scanner reads JSON tokens from b at i. Each method reports whether it
// read what it wanted; after a false the scanner's position is undefined.
type scanner struct {
	b []byte
	i int
}

// maxObjectKeys bounds the members of one object the fast path takes (the
// widest payload object has 14); duplicate detection keeps them on the stack.
const maxObjectKeys = 24

func (s *scanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// eat consumes c, after optional whitespace.
func (s *scanner) eat(c byte) bool {
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (s *scanner) end() bool {
	s.skipSpace()
	return s.i == len(s.b)
}

// object reads an object whose every member's key field knows: field reads
// the value and returns false for a key it does not know. A repeated key
// fails, as encoding/json's "last one wins" would merge nested objects.
func (s *scanner) object(field func(key []byte) bool) bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	var seen [maxObjectKeys][]byte
	for n := 0; ; n++ {
		key, _, ok := s.plainString()
		if !ok || n == maxObjectKeys || !s.eat(':') {
			return false
		}
		for _, k := range seen[:n] {
			if bytes.Equal(k, key) {
				return false
			}
		}
		seen[n] = key
		if !field(key) {
			return false
		}
		if s.eat(',') {
			continue
		}
		return s.eat('}')
	}
}

// array reads an array, elem reading each element.
func (s *scanner) array(elem func() bool) bool {
	if !s.eat('[') {
		return false
	}
	if s.eat(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.eat(',') {
			continue
		}
		return s.eat(']')
	}
}

// plainString reads a string token with no escape, no control character
// and valid UTF-8: one encoding/json decodes to its bytes unchanged. body is
// the text between the quotes, token the whole token.
func (s *scanner) plainString() (body, token []byte, ok bool) {
	s.skipSpace()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, nil, false
	}
	start, ascii := s.i+1, true
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			body = s.b[start:j]
			if !ascii && !utf8.Valid(body) {
				return nil, nil, false
			}
			token, s.i = s.b[start-1:j+1], j+1
			return body, token, true
		case c == '\\' || c < 0x20:
			return nil, nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, nil, false
}

// stringValue reads a string token and returns its text as encoding/json
// decodes it: escapes resolved, a lone or invalid surrogate escape and each
// byte of invalid UTF-8 replaced by U+FFFD. The text is the input's own
// bytes when the token needs none of that.
func (s *scanner) stringValue() ([]byte, bool) {
	s.skipSpace()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start, plain := s.i+1, true
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			body := s.b[start:j]
			s.i = j + 1
			if plain && utf8.Valid(body) {
				return body, true
			}
			return unquote(body)
		case c == '\\':
			plain = false
			j++
		case c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// unquote resolves the escapes of a string's text as encoding/json's
// unquote does, refusing what its scanner refuses (an unknown escape, a
// \u without four hex digits).
func unquote(body []byte) ([]byte, bool) {
	out := make([]byte, 0, len(body))
	for r := 0; r < len(body); {
		c := body[r]
		switch {
		case c == '\\':
			n, ok := unescape(body[r:], &out)
			if !ok {
				return nil, false
			}
			r += n
		case c < utf8.RuneSelf:
			out = append(out, c)
			r++
		default:
			rr, size := utf8.DecodeRune(body[r:]) // invalid: U+FFFD, size 1
			out = utf8.AppendRune(out, rr)
			r += size
		}
	}
	return out, true
}

// unescape appends the text of the escape at the start of e to *out and
// returns the escape's length.
func unescape(e []byte, out *[]byte) (int, bool) {
	if len(e) < 2 {
		return 0, false
	}
	switch e[1] {
	case '"', '\\', '/':
		*out = append(*out, e[1])
	case 'b':
		*out = append(*out, '\b')
	case 'f':
		*out = append(*out, '\f')
	case 'n':
		*out = append(*out, '\n')
	case 'r':
		*out = append(*out, '\r')
	case 't':
		*out = append(*out, '\t')
	case 'u':
		rr := hex4(e, 2)
		if rr < 0 {
			return 0, false
		}
		if utf16.IsSurrogate(rr) {
			// A pair decodes to one rune; anything else to U+FFFD, and
			// what follows is read on its own.
			if len(e) >= 12 && e[6] == '\\' && e[7] == 'u' {
				if dec := utf16.DecodeRune(rr, hex4(e, 8)); dec != utf8.RuneError {
					*out = utf8.AppendRune(*out, dec)
					return 12, true
				}
			}
			rr = utf8.RuneError
		}
		*out = utf8.AppendRune(*out, rr)
		return 6, true
	default:
		return 0, false
	}
	return 2, true
}

func (s *scanner) str(dst *string) bool {
	text, ok := s.stringValue()
	*dst = string(text)
	return ok
}

func (s *scanner) errorClass(dst *ErrorClass) bool {
	text, ok := s.stringValue()
	*dst = ErrorClass(text)
	return ok
}

// time decodes a string with time.Time's own UnmarshalJSON, as
// encoding/json does.
func (s *scanner) time(dst *time.Time) bool {
	_, token, ok := s.plainString()
	return ok && dst.UnmarshalJSON(token) == nil
}

func (s *scanner) timePtr(dst **time.Time) bool {
	*dst = new(time.Time)
	return s.time(*dst)
}

// duration decodes a string as Duration's UnmarshalJSON does: for a
// string without escapes, that is time.ParseDuration of its text.
func (s *scanner) duration(dst *Duration) bool {
	body, _, ok := s.plainString()
	if !ok {
		return false
	}
	d, err := time.ParseDuration(transientString(body))
	*dst = Duration(d)
	return err == nil
}

// int reads a JSON integer of at most 18 digits (so it cannot overflow);
// a fraction or exponent stops the fast path, as encoding/json refuses
// them for an int.
func (s *scanner) int(dst *int) bool {
	s.skipSpace()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start, n := s.i, 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		n = n*10 + int(s.b[s.i]-'0')
		s.i++
	}
	digits := s.i - start
	if digits == 0 || digits > 18 || (digits > 1 && s.b[start] == '0') {
		return false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return false
	}
	if neg {
		n = -n
	}
	*dst = n
	return true
}

// float reads a JSON number and converts it as encoding/json does
// (strconv.ParseFloat); out of float64's range stops the fast path.
func (s *scanner) float(dst *float64) bool {
	s.skipSpace()
	start := s.i
	if !s.number() {
		return false
	}
	f, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
	*dst = f
	return err == nil
}

// number skips one JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

// digits skips a run of decimal digits and returns its length.
func (s *scanner) digits() int {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}

// raw reads any JSON value but null into a json.RawMessage: its exact
// bytes, copied, as json.RawMessage's UnmarshalJSON keeps them. The value's
// extent is found by bracket matching and then checked with json.Valid.
func (s *scanner) raw(dst *json.RawMessage) bool {
	s.skipSpace()
	start := s.i
	if !s.skipValue() {
		return false
	}
	v := s.b[start:s.i]
	if v[0] == 'n' || !json.Valid(v) {
		return false
	}
	*dst = bytes.Clone(v)
	return true
}

// skipValue moves past the value at s.i, leaving json.Valid to judge it:
// it matches brackets outside strings and ends a literal at a delimiter.
func (s *scanner) skipValue() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		return s.skipString()
	case '{', '[':
		return s.skipContainer()
	}
	start := s.i
	for s.i < len(s.b) && !isDelimiter(s.b[s.i]) {
		s.i++
	}
	return s.i > start
}

// skipContainer moves past the object or array opening at s.i.
func (s *scanner) skipContainer() bool {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			if !s.skipString() {
				return false
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.i++
				return true
			}
		}
		s.i++
	}
	return false
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', '}', ']', ':', '"', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// skipString moves past the string whose opening quote is at s.i.
func (s *scanner) skipString() bool {
	for j := s.i + 1; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			j++
		case '"':
			s.i = j + 1
			return true
		}
	}
	return false
}

// transientString views b as a string without copying it, for a parser
// (time.Parse, time.ParseDuration) that keeps no part of its input in what
// it returns; only its errors quote the input, and they are discarded. b
// must not change while the string is in use.
func transientString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func (s *scanner) strings(dst *[]string) bool {
	out := []string{} // encoding/json decodes [] to an empty, non-nil slice
	ok := s.array(func() bool {
		var v string
		ok := s.str(&v)
		out = append(out, v)
		return ok
	})
	*dst = out
	return ok
}

// ref reads a member of an embedded JobRef.
func (s *scanner) ref(key []byte, r *JobRef) bool {
	switch string(key) {
	case "job_id":
		return s.str(&r.JobID)
	case "tenant_id":
		return s.str(&r.TenantID)
	case "attempt":
		return s.int(&r.Attempt)
	}
	return false
}

// attemptOf reads the members shared by the attempt reports (started,
// progress, completed, failed): the job reference, worker and dispatch.
func (s *scanner) attemptOf(key []byte, r *JobRef, worker, dispatch *string) bool {
	switch string(key) {
	case "worker_id":
		return s.str(worker)
	case "dispatch_id":
		return s.str(dispatch)
	}
	return s.ref(key, r)
}

func (s *scanner) started(v *Started) bool {
	return s.object(func(key []byte) bool {
		if string(key) == "started_at" {
			return s.time(&v.StartedAt)
		}
		return s.attemptOf(key, &v.JobRef, &v.WorkerID, &v.DispatchID)
	})
}

func (s *scanner) progress(v *Progress) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "percent":
			return s.float(&v.Percent)
		case "message":
			return s.str(&v.Message)
		case "at":
			return s.time(&v.At)
		case "lease":
			return s.duration(&v.Lease)
		}
		return s.attemptOf(key, &v.JobRef, &v.WorkerID, &v.DispatchID)
	})
}

func (s *scanner) completed(v *Completed) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "result":
			return s.raw(&v.Result)
		case "started_at":
			return s.time(&v.StartedAt)
		case "finished_at":
			return s.time(&v.FinishedAt)
		}
		return s.attemptOf(key, &v.JobRef, &v.WorkerID, &v.DispatchID)
	})
}

func (s *scanner) failed(v *Failed) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "error":
			return s.errorInfo(&v.Error)
		case "retry_after":
			return s.duration(&v.RetryAfter)
		case "started_at":
			return s.time(&v.StartedAt)
		case "finished_at":
			return s.time(&v.FinishedAt)
		}
		return s.attemptOf(key, &v.JobRef, &v.WorkerID, &v.DispatchID)
	})
}

func (s *scanner) cancelled(v *Cancelled) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "reason":
			return s.str(&v.Reason)
		case "actor":
			return s.str(&v.Actor)
		case "at":
			return s.time(&v.At)
		}
		return s.ref(key, &v.JobRef)
	})
}

func (s *scanner) enqueued(v *Enqueued) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "job":
			return s.jobSpec(&v.Job)
		case "created_at":
			return s.time(&v.CreatedAt)
		case "run_at":
			return s.time(&v.RunAt)
		case "reason":
			return s.str(&v.Reason)
		case "actor":
			return s.str(&v.Actor)
		case "idempotency_key":
			return s.str(&v.IdempotencyKey)
		case "request_hash":
			return s.str(&v.RequestHash)
		case "unique":
			v.Unique = new(Unique)
			return s.unique(v.Unique)
		case "redriven_from":
			return s.str(&v.RedrivenFrom)
		case "schedule_id":
			return s.str(&v.ScheduleID)
		case "history":
			return s.history(&v.History)
		}
		return s.ref(key, &v.JobRef)
	})
}

func (s *scanner) dispatch(v *Dispatch) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "dispatch_id":
			return s.str(&v.DispatchID)
		case "job":
			return s.jobSpec(&v.Job)
		case "created_at":
			return s.time(&v.CreatedAt)
		case "ready_at":
			return s.time(&v.ReadyAt)
		case "lease_until":
			return s.time(&v.LeaseUntil)
		case "not_before":
			return s.timePtr(&v.NotBefore)
		}
		return s.ref(key, &v.JobRef)
	})
}

func (s *scanner) deadLettered(v *DeadLettered) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "job":
			return s.jobSpec(&v.Job)
		case "created_at":
			return s.time(&v.CreatedAt)
		case "error":
			return s.errorInfo(&v.Error)
		case "history":
			return s.history(&v.History)
		case "dead_at":
			return s.time(&v.DeadAt)
		case "redriven_from":
			return s.str(&v.RedrivenFrom)
		}
		return s.ref(key, &v.JobRef)
	})
}

func (s *scanner) jobSpec(v *JobSpec) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "type":
			return s.str(&v.Type)
		case "queue":
			return s.str(&v.Queue)
		case "priority":
			return s.int(&v.Priority)
		case "payload":
			return s.raw(&v.Payload)
		case "max_attempts":
			return s.int(&v.MaxAttempts)
		case "timeout":
			return s.duration(&v.Timeout)
		case "not_after":
			return s.timePtr(&v.NotAfter)
		case "tags":
			return s.strings(&v.Tags)
		case "pool":
			return s.str(&v.Pool)
		case "backoff":
			v.Backoff = new(Backoff)
			return s.backoff(v.Backoff)
		case "concurrency":
			v.Concurrency = new(Concurrency)
			return s.concurrency(v.Concurrency)
		}
		return false
	})
}

func (s *scanner) backoff(v *Backoff) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "base":
			return s.duration(&v.Base)
		case "max":
			return s.duration(&v.Max)
		case "jitter":
			v.Jitter = new(float64)
			return s.float(v.Jitter)
		}
		return false
	})
}

func (s *scanner) concurrency(v *Concurrency) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "key":
			return s.str(&v.Key)
		case "limit":
			return s.int(&v.Limit)
		}
		return false
	})
}

func (s *scanner) unique(v *Unique) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "key":
			return s.str(&v.Key)
		case "while":
			return s.str(&v.While)
		case "until":
			return s.time(&v.Until)
		}
		return false
	})
}

func (s *scanner) errorInfo(v *ErrorInfo) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "class":
			return s.errorClass(&v.Class)
		case "message":
			return s.str(&v.Message)
		}
		return false
	})
}

func (s *scanner) history(dst *[]Attempt) bool {
	out := []Attempt{} // encoding/json decodes [] to an empty, non-nil slice
	ok := s.array(func() bool {
		out = append(out, Attempt{})
		return s.attempt(&out[len(out)-1])
	})
	*dst = out
	return ok
}

func (s *scanner) attempt(v *Attempt) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "attempt":
			return s.int(&v.Attempt)
		case "class":
			return s.errorClass(&v.Class)
		case "error":
			return s.str(&v.Error)
		case "worker_id":
			return s.str(&v.WorkerID)
		case "started_at":
			return s.timePtr(&v.StartedAt)
		case "finished_at":
			return s.timePtr(&v.FinishedAt)
		}
		return false
	})
}
