package submit

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func sp(s string) *string { return &s }
func ip(i int) *int       { return &i }

func TestDefaults(t *testing.T) {
	a, err := Validate(Request{Type: "email.send"}, now, Limits{MaxPayloadBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	s := a.Spec
	if s.Queue != "default" || s.Priority != 5 || s.MaxAttempts != 5 || s.Pool != "short" || !a.RunAt.Equal(now) {
		t.Fatalf("%+v", a)
	}
}

func TestFieldErrors(t *testing.T) {
	cases := map[string]Request{
		"type":         {},
		"queue":        {Type: "x", Queue: sp("Bad Queue")},
		"priority":     {Type: "x", Priority: ip(10)},
		"run_at":       {Type: "x", RunAt: sp(now.Add(-2 * time.Hour).Format(time.RFC3339))},
		"delay":        {Type: "x", Delay: sp("2y")},
		"max_attempts": {Type: "x", MaxAttempts: ip(0)},
		"timeout":      {Type: "x", Timeout: sp("25h")},
		"not_after":    {Type: "x", NotAfter: sp(now.Add(-time.Minute).Format(time.RFC3339))},
		"tags":         {Type: "x", Tags: make([]string, 33)},
		"tags[0]":      {Type: "x", Tags: []string{strings.Repeat("a", 65)}},
		"pool":         {Type: "x", Pool: sp("medium")},
		"backoff.max":  {Type: "x", Backoff: &BackoffRequest{Base: sp("2s"), Max: sp("1s")}},
	}
	cases["run_at_ahead"] = Request{Type: "x", RunAt: sp(now.Add(366 * 24 * time.Hour).Format(time.RFC3339))}
	cases["both"] = Request{Type: "x", RunAt: sp(now.Format(time.RFC3339)), Delay: sp("1s")}
	for name, req := range cases {
		_, err := Validate(req, now, Limits{MaxPayloadBytes: 100})
		var inv *Invalid
		if !errors.As(err, &inv) {
			t.Errorf("%s: no error", name)
			continue
		}
		field := name
		if name == "run_at_ahead" || name == "both" {
			field = "run_at"
		}
		if _, ok := inv.Fields[field]; !ok {
			t.Errorf("%s: fields %v", name, inv.Fields)
		}
	}
}

func TestRunAtAndDelay(t *testing.T) {
	a, err := Validate(Request{Type: "x", Delay: sp("90s")}, now, Limits{})
	if err != nil || !a.RunAt.Equal(now.Add(90*time.Second)) {
		t.Fatalf("%v %v", a.RunAt, err)
	}
	a, err = Validate(Request{Type: "x", RunAt: sp(now.Add(-30 * time.Minute).Format(time.RFC3339))}, now, Limits{})
	if err != nil || !a.RunAt.Equal(now) {
		t.Fatalf("a recent past run_at runs now: %v %v", a.RunAt, err)
	}
}

func TestPayloadTooLarge(t *testing.T) {
	_, err := Validate(Request{Type: "x", Payload: json.RawMessage(`"` + strings.Repeat("a", 200) + `"`)}, now, Limits{MaxPayloadBytes: 100})
	var inv *Invalid
	if !errors.As(err, &inv) || !inv.TooLarge {
		t.Fatalf("%v", err)
	}
}

func TestHashIgnoresFormatting(t *testing.T) {
	a := Request{Type: "x", Payload: json.RawMessage(`{"a": 1, "b": [1,2]}`)}
	b := Request{Type: "x", Payload: json.RawMessage(`{"b":[1,2],"a":1}`), IdempotencyKey: "k"}
	c := Request{Type: "x", Payload: json.RawMessage(`{"b":[1,2],"a":2}`)}
	if Hash(a) != Hash(b) || Hash(a) == Hash(c) {
		t.Fatal("hash")
	}
}

// TestBackoffJitter: backoff.jitter is carried when within [0, 1].
func TestBackoffJitter(t *testing.T) {
	now := time.Now()
	lim := Limits{MaxPayloadBytes: 1024}
	zero, bad := 0.0, 1.5
	a, err := Validate(Request{Type: "x", Backoff: &BackoffRequest{Jitter: &zero}}, now, lim)
	if err != nil || a.Spec.Backoff == nil || a.Spec.Backoff.Jitter == nil || *a.Spec.Backoff.Jitter != 0 {
		t.Fatalf("jitter 0: %+v %v", a.Spec.Backoff, err)
	}
	_, err = Validate(Request{Type: "x", Backoff: &BackoffRequest{Jitter: &bad}}, now, lim)
	var inv *Invalid
	if !errors.As(err, &inv) || inv.Fields["backoff.jitter"] == "" {
		t.Fatalf("jitter 1.5: %v", err)
	}
}
