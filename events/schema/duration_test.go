package schema

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDurationMarshal(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                `"0s"`,
		500 * time.Millisecond:           `"500ms"`,
		2 * time.Second:                  `"2s"`,
		90 * time.Minute:                 `"1h30m0s"`,
		1500 * time.Microsecond:          `"1.5ms"`,
		-3 * time.Second:                 `"-3s"`,
		time.Duration(1<<63 - 1):         `"2562047h47m16.854775807s"`,
		36*time.Hour + 5*time.Nanosecond: `"36h0m0.000000005s"`,
		time.Microsecond:                 `"1µs"`,
	} {
		b, err := json.Marshal(Duration(d))
		if err != nil || string(b) != want {
			t.Errorf("Marshal(%d) = %s, %v; want %s", d, b, err, want)
		}
		var back Duration
		if err := json.Unmarshal(b, &back); err != nil || back.D() != d {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", b, back.D(), err, d)
		}
	}
}

func TestDurationUnmarshal(t *testing.T) {
	for in, want := range map[string]time.Duration{
		`"500ms"`:   500 * time.Millisecond,
		`"2s"`:      2 * time.Second,
		`"1h30m"`:   90 * time.Minute,
		`"1.5h"`:    90 * time.Minute,
		`"0"`:       0,
		`"300us"`:   300 * time.Microsecond,
		`"300µs"`:   300 * time.Microsecond,
		`"-1m"`:     -time.Minute,
		`"\u0032s"`: 2 * time.Second,
	} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || d.D() != want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", in, d.D(), err, want)
		}
	}
}

func TestDurationRejects(t *testing.T) {
	for in, msg := range map[string]string{
		`5`:           `must be a string`,
		`5.0`:         `must be a string`,
		`true`:        `must be a string`,
		`{}`:          `must be a string`,
		`["2s"]`:      `must be a string`,
		`""`:          `invalid duration ""`,
		`"5"`:         `invalid duration "5"`,
		`"1d"`:        `invalid duration "1d"`,
		`"2 s"`:       `invalid duration "2 s"`,
		`"99999999h"`: `invalid duration`,
	} {
		var d Duration
		err := json.Unmarshal([]byte(in), &d)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Unmarshal(%s) = %v, %v; want an error mentioning %q", in, d.D(), err, msg)
		}
	}
}

// A null leaves the value alone, as for built-in types, so an explicit
// "timeout": null means "not set".
func TestDurationNull(t *testing.T) {
	var v struct {
		Timeout Duration `json:"timeout,omitempty"`
	}
	v.Timeout = Duration(time.Second)
	if err := json.Unmarshal([]byte(`{"timeout":null}`), &v); err != nil || v.Timeout.D() != time.Second {
		t.Errorf("null: %v, %v; want unchanged 1s", v.Timeout.D(), err)
	}
	var spec JobSpec
	if err := json.Unmarshal([]byte(`{"type":"x","timeout":null,"backoff":{"base":null,"max":"1m"}}`), &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Timeout != 0 || spec.Backoff == nil || spec.Backoff.Base != 0 || spec.Backoff.Max.D() != time.Minute {
		t.Errorf("spec = %+v, backoff %+v", spec, spec.Backoff)
	}
}

// Zero durations are omitted from JobSpec, Backoff and Failed, so a zero
// value is never on the wire as "0s".
func TestDurationOmitEmpty(t *testing.T) {
	b, err := json.Marshal(Failed{JobRef: JobRef{JobID: "j", TenantID: "t", Attempt: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "retry_after") {
		t.Errorf("zero retry_after encoded: %s", b)
	}
	b, err = json.Marshal(JobSpec{Backoff: &Backoff{}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "timeout") || !strings.Contains(string(b), `"backoff":{}`) {
		t.Errorf("zero durations encoded: %s", b)
	}
}
