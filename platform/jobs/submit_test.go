package jobs

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

// TestUnstorableText: NUL and invalid UTF-8 in any text field are field
// errors, so no record a projection cannot store is ever produced.
func TestUnstorableText(t *testing.T) {
	for _, bad := range []string{"a\x00b", "a\xffb"} {
		cases := map[string]Request{
			"type":            {Type: "x" + bad},
			"queue":           {Type: "x", Queue: sp("q" + bad)},
			"tags[1]":         {Type: "x", Tags: []string{"ok", bad}},
			"pool":            {Type: "x", Pool: sp(bad)},
			"idempotency_key": {Type: "x", IdempotencyKey: "k" + bad},
			"run_at":          {Type: "x", RunAt: sp(bad)},
			"delay":           {Type: "x", Delay: sp(bad)},
			"timeout":         {Type: "x", Timeout: sp(bad)},
			"not_after":       {Type: "x", NotAfter: sp(bad)},
			"backoff.base":    {Type: "x", Backoff: &BackoffRequest{Base: sp(bad)}},
		}
		for field, req := range cases {
			_, err := Validate(req, now, Limits{MaxPayloadBytes: 100})
			var inv *Invalid
			if !errors.As(err, &inv) || len(inv.Fields) != 1 {
				t.Errorf("%s %q: %v", field, bad, err)
				continue
			}
			msg, ok := inv.Fields[field]
			if !ok || !(strings.Contains(msg, "NUL") || strings.Contains(msg, "UTF-8")) || inv.Code != "" {
				t.Errorf("%s %q: fields %v code %q", field, bad, inv.Fields, inv.Code)
			}
		}
	}
}

// TestUnstorablePayload: a payload jsonb cannot store is refused with
// payload_unstorable and the path of the bad value.
func TestUnstorablePayload(t *testing.T) {
	cases := map[string]string{
		`{"a":{"b":["ok","x\u0000"]}}`: "payload.a.b[1]",
		`"\u0000"`:                     "payload",
		`{"k\u0000":1}`:                `payload["k\u0000"]`,
		`["\ud800"]`:                   "payload[0]",
		"{\"s\":\"\xff\"}":             "payload.s",
		`{"n":1e400}`:                  "payload.n",
	}
	for doc, field := range cases {
		_, err := Validate(Request{Type: "x", Payload: json.RawMessage(doc)}, now, Limits{MaxPayloadBytes: 1000})
		var inv *Invalid
		if !errors.As(err, &inv) || inv.Code != CodePayloadUnstorable || inv.TooLarge || inv.Fields[field] == "" {
			t.Errorf("%s: %v (code %q, fields %v)", doc, err, codeOf(inv), fieldsOf(inv))
		}
	}
	// With another bad field the code is the generic one.
	_, err := Validate(Request{Type: "x", Priority: ip(99), Payload: json.RawMessage(`"\u0000"`)}, now, Limits{MaxPayloadBytes: 1000})
	var inv *Invalid
	if !errors.As(err, &inv) || inv.Code != "" || len(inv.Fields) != 2 {
		t.Fatalf("two bad fields: %v code %q", err, codeOf(inv))
	}
}

func codeOf(inv *Invalid) string {
	if inv == nil {
		return ""
	}
	return inv.Code
}

func fieldsOf(inv *Invalid) map[string]string {
	if inv == nil {
		return nil
	}
	return inv.Fields
}

// TestPayloadLimitOnEncodedBytes: the limit applies to the payload as the
// enqueued event carries it: '<' counts 6 bytes, whitespace none.
func TestPayloadLimitOnEncodedBytes(t *testing.T) {
	lim := Limits{MaxPayloadBytes: 1000}
	blowup := json.RawMessage(`"` + strings.Repeat("<", 500) + `"`) // 502 bytes sent, 3002 produced
	_, err := Validate(Request{Type: "x", Payload: blowup}, now, lim)
	var inv *Invalid
	if !errors.As(err, &inv) || !inv.TooLarge {
		t.Fatalf("'<' blow-up: %v", err)
	}
	spaced := json.RawMessage(`[` + strings.Repeat(" 1 ,", 300) + ` 1 ]`) // 1205 bytes sent, 603 produced
	a, err := Validate(Request{Type: "x", Payload: spaced}, now, lim)
	if err != nil || len(a.Spec.Payload) != 603 {
		t.Fatalf("whitespace: %v, %d bytes", err, len(a.Spec.Payload))
	}
	a, err = Validate(Request{Type: "x", Payload: json.RawMessage(`{"h":"<b>"}`)}, now, lim)
	if err != nil || string(a.Spec.Payload) != `{"h":"\u003cb\u003e"}` {
		t.Fatalf("the spec holds the produced bytes: %s %v", a.Spec.Payload, err)
	}
}

// TestMaxDelay: run_at, delay and backoff stay within Limits.MaxDelay, with
// run_at_too_far.
func TestMaxDelay(t *testing.T) {
	lim := Limits{MaxDelay: 6 * 24 * time.Hour}
	ok := []Request{
		{Type: "x", Delay: sp("144h")},
		{Type: "x", RunAt: sp(now.Add(6 * 24 * time.Hour).Format(time.RFC3339))},
		{Type: "x", Backoff: &BackoffRequest{Max: sp("144h")}},
	}
	for _, req := range ok {
		if _, err := Validate(req, now, lim); err != nil {
			t.Errorf("%+v: %v", req, err)
		}
	}
	far := map[string]Request{
		"delay":  {Type: "x", Delay: sp("144h1s")},
		"run_at": {Type: "x", RunAt: sp(now.Add(6*24*time.Hour + time.Second).Format(time.RFC3339))},
	}
	for field, req := range far {
		_, err := Validate(req, now, lim)
		var inv *Invalid
		if !errors.As(err, &inv) || inv.Code != CodeRunAtTooFar || inv.Fields[field] == "" {
			t.Errorf("%s: %v code %q", field, err, codeOf(inv))
		}
	}
	_, err := Validate(Request{Type: "x", Backoff: &BackoffRequest{Max: sp("145h")}}, now, lim)
	var inv *Invalid
	if !errors.As(err, &inv) || inv.Fields["backoff.max"] == "" {
		t.Fatalf("backoff beyond the max delay: %v", err)
	}
}

// TestUnique: a unique key gets its defaults (until_done, 24h from now),
// keeps what was given, and bad fields are field errors.
func TestUnique(t *testing.T) {
	a, err := Validate(Request{Type: "x", Unique: &UniqueRequest{Key: "user-7"}}, now, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if u := a.Unique; u == nil || u.Key != "user-7" || u.While != "until_done" || !u.Until.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("defaults: %+v", a.Unique)
	}
	a, err = Validate(Request{Type: "x", Unique: &UniqueRequest{Key: "k", While: sp("queued"), TTL: sp("1h")}}, now, Limits{})
	if err != nil || a.Unique.While != "queued" || !a.Unique.Until.Equal(now.Add(time.Hour)) {
		t.Fatalf("given: %+v %v", a.Unique, err)
	}
	if a, _ := Validate(Request{Type: "x"}, now, Limits{}); a.Unique != nil {
		t.Fatalf("no unique key: %+v", a.Unique)
	}
	bad := map[string]*UniqueRequest{
		"unique.key":   {Key: ""},
		"unique.while": {Key: "k", While: sp("running")},
		"unique.ttl":   {Key: "k", TTL: sp("0.5s")},
	}
	bad["unique.key "] = &UniqueRequest{Key: strings.Repeat("k", 256)}
	bad["unique.ttl "] = &UniqueRequest{Key: "k", TTL: sp("800h")}
	bad["unique.key  "] = &UniqueRequest{Key: "a\x00b"}
	for name, u := range bad {
		_, err := Validate(Request{Type: "x", Unique: u}, now, Limits{})
		var inv *Invalid
		if !errors.As(err, &inv) || inv.Fields[strings.TrimSpace(name)] == "" {
			t.Errorf("%s: %v", name, err)
		}
	}
}
