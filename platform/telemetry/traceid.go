package telemetry

import "strings"

// TraceIDOf returns the trace-id of a W3C traceparent header value
// ("00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>", surrounding
// space ignored) in lower case, or "" when the value has none: missing,
// malformed, or the all-zero id. The status projection and the audit log
// store it beside every job and event, so it is read once per record on
// their hot path: the usual lower-case value costs no allocation (the id
// is a substring of traceparent).
func TraceIDOf(traceparent string) string {
	tp := strings.TrimSpace(traceparent)
	_, rest, ok := strings.Cut(tp, "-")
	if !ok {
		return ""
	}
	id, rest, ok := strings.Cut(rest, "-")
	// The parent-id and flags follow (more fields are allowed: a later
	// version may add some).
	if !ok || len(id) != 32 || !strings.Contains(rest, "-") {
		return ""
	}
	upper, zero := false, true
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'A' && c <= 'F':
			upper = true
		case c >= '0' && c <= '9' || c >= 'a' && c <= 'f':
		default:
			return ""
		}
		zero = zero && id[i] == '0'
	}
	if zero {
		return ""
	}
	if upper {
		return strings.ToLower(id)
	}
	return id
}
