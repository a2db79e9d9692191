package schema

// Storability: what every consumer of a record can keep.
//
// Every record ends up in Postgres: text columns (type, queue, tags, error
// messages, names) and jsonb columns (payloads, results, whole events in the
// sse-bridge log). Postgres refuses some values that Go and Kafka carry
// happily, and a projection that cannot store a record retries its batch
// forever, stopping every tenant behind it. This file is the one rule every
// producer checks (at the door: api, dlq, webhooks) or enforces (on output:
// worker, webhook delivery log) so that no record it writes can do that.
// It lives here, in the wire contract, because it is a property of the
// records themselves and every service already imports this package.
//
// What Postgres refuses:
//   - text: the NUL character and invalid UTF-8;
//   - jsonb: the escape \u0000 in any string (key or value), an unpaired
//     UTF-16 surrogate escape (\ud800 alone), invalid UTF-8, and numbers
//     outside numeric's range (1e1000000, or more than 16383 digits after
//     the point).
//
// Go's encoding/json does not help: decoding into a string replaces invalid
// UTF-8 and lone surrogates with U+FFFD but keeps NUL, and a
// json.RawMessage is copied as is, escapes and bytes included.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrUnstorable is wrapped by every error of CheckText, CheckJSON and
// EncodePayload that says a value cannot be stored.
var ErrUnstorable = errors.New("schema: value cannot be stored")

// Bounds of JSON numbers. Postgres' numeric refuses more than 16383 digits
// after the point; a number far outside float64's range is both useless to
// every JSON library and a way to make a short payload print as a huge one
// (1e131071 is 8 bytes in, 131072 digits out of jsonb), so the bounds are
// float64's: a magnitude below 1e309, at most 340 digits after the point.
const (
	maxNumberExponent = 308
	maxNumberScale    = 340
)

// MaxRecordBytes bounds a record Ferry produces (key, value and headers):
// below the producer's batch limit (franz-go's default ProducerBatchMaxBytes
// is 1,000,012 bytes, Kafka's message.max.bytes default) with room for the
// batch and record framing and the traceparent header the tracing hook adds.
const MaxRecordBytes = 1_000_012 - 8<<10

// Bounds of the text an attempt's reporter (a worker, or a receiver through
// the callback API) puts into events, as EventText makes it. Error messages
// travel again in every retry and the dlq event's history, so they stay
// short.
const (
	MaxErrorMessage    = 4096
	MaxProgressMessage = 1024
)

// MaxSubmitRecordBytes bounds the enqueued record of a new or re-driven job:
// half of MaxRecordBytes, so the job's retry and dlq events, which carry the
// same spec plus the attempt history, still fit.
const MaxSubmitRecordBytes = MaxRecordBytes / 2

// RecordBytes is the size r takes against MaxRecordBytes.
func RecordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// CheckText reports why s cannot be stored as text: it holds a NUL
// character or is not valid UTF-8. The error's message reads as a field
// error ("must not contain …").
func CheckText(s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: must not contain the NUL character (\\u0000)", ErrUnstorable)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: must be valid UTF-8", ErrUnstorable)
	}
	return nil
}

// FieldMessage is err's message without the ErrUnstorable prefix, for a
// field error.
func FieldMessage(err error) string {
	return strings.TrimPrefix(err.Error(), ErrUnstorable.Error()+": ")
}

// SanitizeText makes s storable text of at most max bytes (max <= 0: no
// bound): invalid UTF-8 and NUL become U+FFFD, and a cut keeps whole
// characters and ends with "…". Output the system did not choose (handler
// errors, response bodies, receiver answers) goes through it.
func SanitizeText(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if max > 0 && len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// EventText is SanitizeText whose bound applies to s as it travels in an
// event: its JSON encoding ('<' is 6 bytes, a control character up to 6)
// is at most limit bytes, quotes included. Texts repeated in every retry and
// dlq event (error messages) use it, so a history stays within
// MaxRecordBytes whatever the messages hold.
func EventText(s string, limit int) string {
	s = SanitizeText(s, limit)
	for {
		enc, _ := json.Marshal(s)
		over := len(enc) - limit
		if over <= 0 || s == "" {
			return s
		}
		// Each byte cut removes at least one encoded byte.
		s = SanitizeText(strings.TrimSuffix(s, "…"), max(len(s)-len("…")-over, 1))
	}
}

// UnstorableJSONError says where a JSON document holds a value jsonb cannot
// store. It wraps ErrUnstorable.
type UnstorableJSONError struct {
	// Path locates the value from the document's root: "" for the root,
	// else like .a.b[2] or ["odd key"].
	Path string
	// Reason says what is wrong, e.g. "holds the NUL character (\u0000)".
	Reason string
}

func (e *UnstorableJSONError) Error() string {
	return fmt.Sprintf("%v: value at %q %s", ErrUnstorable, "$"+e.Path, e.Reason)
}

// Unwrap makes errors.Is(err, ErrUnstorable) hold.
func (e *UnstorableJSONError) Unwrap() error { return ErrUnstorable }

// CheckJSON reports the first value of the JSON document doc that Postgres
// jsonb cannot store, as an *UnstorableJSONError. doc must be valid JSON
// (json.Valid); CheckJSON does not re-check its syntax.
func CheckJSON(doc []byte) error {
	sc := jsonScan{doc: doc}
	return sc.run()
}

// EncodePayload returns raw as it travels in an event: compact, with '<',
// '>', '&', U+2028 and U+2029 escaped exactly as encoding/json escapes a
// json.RawMessage it marshals, so its length is the length that will be
// produced. It fails when raw is not JSON (an error that does not wrap
// ErrUnstorable) or holds a value Postgres cannot store (an
// *UnstorableJSONError).
func EncodePayload(raw []byte) (json.RawMessage, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, fmt.Errorf("schema: payload is not JSON: %w", err)
	}
	if err := CheckJSON(compact.Bytes()); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Grow(compact.Len())
	json.HTMLEscape(&out, compact.Bytes())
	return out.Bytes(), nil
}

// SanitizeJSON returns a storable form of the valid JSON document doc and
// whether it had to change it: NUL in strings and keys becomes U+FFFD (as
// decoding already does for invalid UTF-8 and lone surrogates), a number
// out of range becomes its text. Object keys come out sorted. It fails only
// when doc cannot be decoded (for instance nested deeper than
// encoding/json's limit).
func SanitizeJSON(doc []byte) (json.RawMessage, bool, error) {
	if CheckJSON(doc) == nil {
		return doc, false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false, fmt.Errorf("schema: sanitize JSON: %w", err)
	}
	out, err := json.Marshal(sanitizeValue(v))
	if err != nil {
		return nil, false, fmt.Errorf("schema: sanitize JSON: %w", err)
	}
	return out, true, nil
}

func sanitizeValue(v any) any {
	switch x := v.(type) {
	case string:
		return SanitizeText(x, 0)
	case json.Number:
		if numberProblem([]byte(x)) != "" {
			return string(x)
		}
		return x
	case []any:
		for i := range x {
			x[i] = sanitizeValue(x[i])
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			out[SanitizeText(k, 0)] = sanitizeValue(val)
		}
		return out
	}
	return v
}

// jsonScan walks a valid JSON document once, keeping the path to the
// current value, and stops at the first unstorable string or number.
type jsonScan struct {
	doc   []byte
	i     int
	stack []frame
}

// frame is one open object or array.
type frame struct {
	object    bool
	key       string // object: the current member's key
	wantKey   bool   // object: the next string is a key
	index     int    // array: the current element's index
	hasMember bool
}

func (sc *jsonScan) run() error {
	for sc.i < len(sc.doc) {
		c := sc.doc[sc.i]
		switch {
		case c == '{' || c == '[':
			sc.open(c == '{')
		case c == '}' || c == ']':
			sc.stack = sc.stack[:len(sc.stack)-1]
			sc.i++
		case c == ',':
			sc.next()
		case c == '"':
			if err := sc.str(); err != nil {
				return err
			}
		case c == '-' || (c >= '0' && c <= '9'):
			start := sc.i
			for sc.i < len(sc.doc) && isNumberByte(sc.doc[sc.i]) {
				sc.i++
			}
			if reason := numberProblem(sc.doc[start:sc.i]); reason != "" {
				return &UnstorableJSONError{Path: sc.path(), Reason: reason}
			}
		default: // whitespace, ':', true, false, null
			sc.i++
		}
	}
	return nil
}

func (sc *jsonScan) open(object bool) {
	sc.stack = append(sc.stack, frame{object: object, wantKey: object})
	sc.i++
}

func (sc *jsonScan) next() {
	if n := len(sc.stack); n > 0 {
		f := &sc.stack[n-1]
		if f.object {
			f.wantKey = true
		} else {
			f.index++
		}
	}
	sc.i++
}

// str scans the string at sc.i (its opening quote) and checks it.
func (sc *jsonScan) str() error {
	start := sc.i + 1
	end, reason := stringEnd(sc.doc, start)
	sc.i = end + 1
	isKey := false
	if n := len(sc.stack); n > 0 && sc.stack[n-1].wantKey {
		f := &sc.stack[n-1]
		f.key, f.wantKey, f.hasMember, isKey = string(sc.doc[start:min(end, start+64)]), false, true, true
	}
	if reason != "" {
		if isKey {
			reason = "has a key that " + reason
		}
		return &UnstorableJSONError{Path: sc.path(), Reason: reason}
	}
	return nil
}

// stringEnd returns the index of the closing quote of the string whose
// contents start at i, and what makes it unstorable, if anything.
func stringEnd(doc []byte, i int) (int, string) {
	for i < len(doc) {
		c := doc[i]
		switch {
		case c == '"':
			return i, ""
		case c == '\\' && i+1 < len(doc) && doc[i+1] == 'u':
			r := hex4(doc, i+2)
			switch {
			case r == 0:
				return skipString(doc, i), "holds the NUL character (\\u0000)"
			case r >= 0xD800 && r < 0xDC00:
				if i+11 < len(doc) && doc[i+6] == '\\' && doc[i+7] == 'u' {
					if lo := hex4(doc, i+8); lo >= 0xDC00 && lo < 0xE000 {
						i += 12
						continue
					}
				}
				return skipString(doc, i), "holds an unpaired UTF-16 surrogate escape"
			case r >= 0xDC00 && r < 0xE000:
				return skipString(doc, i), "holds an unpaired UTF-16 surrogate escape"
			case r < 0:
				return skipString(doc, i), "holds an invalid \\u escape"
			}
			i += 6
		case c == '\\':
			i += 2
		case c == 0:
			return skipString(doc, i), "holds the NUL character (\\u0000)"
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(doc[i:])
			if r == utf8.RuneError && size <= 1 {
				return skipString(doc, i), "is not valid UTF-8"
			}
			i += size
		}
	}
	return i, ""
}

// skipString returns the index of the closing quote of the string that
// holds index i.
func skipString(doc []byte, i int) int {
	for i < len(doc) {
		switch doc[i] {
		case '\\':
			i += 2
			continue
		case '"':
			return i
		}
		i++
	}
	return i
}

// hex4 decodes the four hex digits at doc[i:], or -1.
func hex4(doc []byte, i int) rune {
	if i+4 > len(doc) {
		return -1
	}
	n, err := strconv.ParseUint(string(doc[i:i+4]), 16, 32)
	if err != nil {
		return -1
	}
	return rune(n)
}

func isNumberByte(c byte) bool {
	return c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || (c >= '0' && c <= '9')
}

// numberProblem says why the JSON number lit is out of the storable
// range, or "".
func numberProblem(lit []byte) string {
	s := strings.TrimPrefix(string(lit), "-")
	mant, exp := s, 0
	if k := strings.IndexAny(s, "eE"); k >= 0 {
		mant = s[:k]
		e, err := strconv.Atoi(strings.TrimPrefix(s[k+1:], "+"))
		if err != nil || e > 1<<20 || e < -(1<<20) {
			return "is a number out of range"
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if scale := len(frac) - exp; scale > maxNumberScale {
		return fmt.Sprintf("is a number with more than %d digits after the decimal point", maxNumberScale)
	}
	digits := intPart + frac
	first := strings.IndexFunc(digits, func(r rune) bool { return r != '0' })
	if first < 0 {
		return "" // zero
	}
	if msd := len(intPart) - 1 - first + exp; msd > maxNumberExponent {
		return fmt.Sprintf("is a number of magnitude 1e%d or more", maxNumberExponent+1)
	}
	return ""
}

// path renders the location of the current value; for a key, the location
// of its member.
func (sc *jsonScan) path() string {
	var b strings.Builder
	for _, f := range sc.stack {
		switch {
		case f.object && f.hasMember:
			writeKey(&b, f.key)
		case !f.object:
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
		}
	}
	return b.String()
}

// writeKey appends .key, or ["key"] when key is not a plain name; the key
// is shown sanitized, as the raw text between its quotes.
func writeKey(b *strings.Builder, key string) {
	plain := key != ""
	for _, r := range key {
		if !(r == '_' || r == '-' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')) {
			plain = false
			break
		}
	}
	if plain {
		b.WriteString("." + key)
		return
	}
	b.WriteString(`["` + SanitizeText(key, 0) + `"]`)
}
