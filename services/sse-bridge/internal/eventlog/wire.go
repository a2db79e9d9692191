package eventlog

import (
	"encoding/json"
	"strconv"

	"github.com/ferryhq/ferry/events/schema/jsonw"
)

// renderWire returns the SSE data line of w: json.Marshal(w)'s bytes,
// appended with encoding/json's rules (package jsonw) instead of through
// its reflection and its compacting scanner. w.Data must be valid JSON, a
// decoded record's value: it is copied compacted and escaped
// (jsonw.Compact), not validated again. A time json.Marshal refuses (a year
// outside 0000–9999) goes through json.Marshal, for its error.
func renderWire(w wireEvent) ([]byte, error) {
	b := make([]byte, 0, len(w.Data)+256)
	b = jsonw.String(append(b, `{"id":`...), w.ID)
	b = jsonw.String(append(b, `,"type":`...), w.Type)
	b, ok := jsonw.Time(append(b, `,"time":`...), w.Time)
	if !ok {
		return json.Marshal(w)
	}
	b = jsonw.String(append(b, `,"job_id":`...), w.JobID)
	b = jsonw.String(append(b, `,"tenant_id":`...), w.TenantID)
	b = strconv.AppendInt(append(b, `,"attempt":`...), int64(w.Attempt), 10)
	b = jsonw.Compact(append(b, `,"data":`...), w.Data)
	return append(b, '}'), nil
}
