package eventlog

import (
	"encoding/json"
	"strconv"
	"time"
)

// renderWire returns the SSE data line of w (whose Data is valid JSON: a
// decoded record's value): json.Marshal(w), built by
// appending when every part is already in the form json.Marshal writes
// (the usual case: records are written by json.Marshal), so a record's
// value passes through as it is instead of through encoding/json's
// compacting scanner; by json.Marshal otherwise.
func renderWire(w wireEvent) ([]byte, error) {
	if b, ok := appendWire(make([]byte, 0, len(w.Data)+256), w); ok {
		return b, nil
	}
	return json.Marshal(w)
}

// appendWire appends the JSON of w to b; false when some part needs what
// json.Marshal does beyond copying (an escape, compacting, a time outside
// RFC 3339's years).
func appendWire(b []byte, w wireEvent) ([]byte, bool) {
	if y := w.Time.Year(); y < 0 || y > 9999 || !verbatimJSON(w.Data) {
		return nil, false
	}
	ok := true
	b, ok = appendField(b, `{"id":`, w.ID, ok)
	b, ok = appendField(b, `,"type":`, w.Type, ok)
	b = append(b, `,"time":"`...)
	b = append(w.Time.AppendFormat(b, time.RFC3339Nano), '"')
	b, ok = appendField(b, `,"job_id":`, w.JobID, ok)
	b, ok = appendField(b, `,"tenant_id":`, w.TenantID, ok)
	b = append(b, `,"attempt":`...)
	b = appendInt(b, w.Attempt)
	b = append(b, `,"data":`...)
	b = append(b, w.Data...)
	return append(b, '}'), ok
}

// appendField appends name and the JSON string s, when s needs no escape
// (printable ASCII but for '"', '\\' and the HTML characters json.Marshal
// escapes); ok carries a previous failure along.
func appendField(b []byte, name, s string, ok bool) ([]byte, bool) {
	for i := 0; i < len(s) && ok; i++ {
		c := s[i]
		ok = c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	b = append(b, name...)
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), ok
}

func appendInt(b []byte, n int) []byte {
	return strconv.AppendInt(b, int64(n), 10)
}

// verbatimJSON reports whether json.Marshal copies the valid JSON doc as
// a json.RawMessage unchanged: it holds no whitespace outside strings and
// nothing json.Marshal escapes ('<', '>', '&', U+2028, U+2029).
func verbatimJSON(doc []byte) bool {
	inString := false
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; c {
		case '"':
			inString = !inString
		case '\\':
			i++ // only inside a string: the escaped byte is not a quote
		case ' ', '\t', '\n', '\r':
			if !inString {
				return false
			}
		case '<', '>', '&':
			return false
		case 0xE2: // U+2028 and U+2029 are E2 80 A8 and E2 80 A9
			if i+2 < len(doc) && doc[i+1] == 0x80 && (doc[i+2] == 0xA8 || doc[i+2] == 0xA9) {
				return false
			}
		}
	}
	return true
}
