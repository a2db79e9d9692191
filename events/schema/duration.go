package schema

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that travels as a Go duration string
// ("500ms", "2s", "1h30m") in JSON, as docs/design.md §6 fixes for the wire.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON encodes the duration as a string such as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts a duration string; it rejects bare numbers so a
// client never wonders whether 5 meant seconds or nanoseconds. A JSON null
// leaves the value unchanged, as encoding/json does for built-in types.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"500ms\" or \"2s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: use a form such as \"500ms\", \"2s\" or \"1h30m\"", s)
	}
	*d = Duration(v)
	return nil
}
