package jobs

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ferryhq/ferry/platform/auth"
)

// TestPayloadLimitIsTheTenantsOverTheDeployments: a tenant's own
// max_payload_bytes wins, either way; without one the deployment's holds.
func TestPayloadLimitIsTheTenantsOverTheDeployments(t *testing.T) {
	for _, tc := range []struct{ own, deployment, want int }{{0, 1000, 1000}, {64, 1000, 64}, {5000, 1000, 5000}} {
		if got := PayloadLimit(auth.Settings{MaxPayloadBytes: tc.own}, tc.deployment); got != tc.want {
			t.Errorf("own %d, deployment %d: %d, want %d", tc.own, tc.deployment, got, tc.want)
		}
		lim := TenantLimits(auth.Settings{MaxPayloadBytes: tc.own}, Defaults{MaxPayloadBytes: tc.deployment})
		if lim.MaxPayloadBytes != tc.want {
			t.Errorf("TenantLimits: %+v", lim)
		}
	}
}

// TestRedriveEditAnswersAsASubmission: an edited payload or attempt budget
// is refused with the very answer (status, code, fields) a submission with
// it gets under the same limits.
func TestRedriveEditAnswersAsASubmission(t *testing.T) {
	lim := Limits{MaxPayloadBytes: 32}
	zero, many := 0, MaxMaxAttempts+1
	for name, tc := range map[string]struct {
		payload     string
		maxAttempts *int
		status      int
		code        string
	}{
		"too large":      {`{"blob":"` + strings.Repeat("x", 40) + `"}`, nil, 413, "payload_too_large"},
		"escaped size":   {`"<<<<<<"`, nil, 413, "payload_too_large"},
		"unstorable":     {`{"a":"\u0000"}`, nil, 422, "payload_unstorable"},
		"budget zero":    {`{"a":1}`, &zero, 422, "validation_failed"},
		"budget too big": {``, &many, 422, "validation_failed"},
		"both":           {`{"blob":"` + strings.Repeat("x", 40) + `"}`, &zero, 422, "validation_failed"},
	} {
		t.Run(name, func(t *testing.T) {
			var raw json.RawMessage
			if tc.payload != "" {
				raw = json.RawMessage(tc.payload)
			}
			_, err := CheckRedriveEdit(raw, tc.maxAttempts, lim)
			redrive := httpErr(t, err)
			submission := httpErr(t, second(Validate(Request{Type: "t", Payload: raw, MaxAttempts: tc.maxAttempts}, now, lim)))
			if redrive.Status != tc.status || redrive.Code != tc.code {
				t.Fatalf("re-drive answers %d %s, want %d %s (%v)", redrive.Status, redrive.Code, tc.status, tc.code, redrive.Fields)
			}
			if submission.Status != redrive.Status || submission.Code != redrive.Code || len(submission.Fields) != len(redrive.Fields) {
				t.Fatalf("submission %d %s %v, re-drive %d %s %v", submission.Status, submission.Code, submission.Fields,
					redrive.Status, redrive.Code, redrive.Fields)
			}
		})
	}
}

// TestRedriveEditKeepsClearsOrReplaces: no payload keeps the original
// (nil), JSON null clears it, anything else is stored as produced.
func TestRedriveEditKeepsClearsOrReplaces(t *testing.T) {
	lim := Limits{MaxPayloadBytes: 64}
	for in, want := range map[string]string{"": "", "null": "null", ` { "a" : "<b>" } `: `{"a":"\u003cb\u003e"}`} {
		var raw json.RawMessage
		if in != "" {
			raw = json.RawMessage(in)
		}
		got, err := CheckRedriveEdit(raw, nil, lim)
		if err != nil || string(got) != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func httpErr(t *testing.T, err error) struct {
	Status int
	Code   string
	Fields map[string]string
} {
	t.Helper()
	var inv *Invalid
	if !errors.As(err, &inv) {
		t.Fatalf("want *Invalid, got %v", err)
	}
	e := inv.HTTPError()
	return struct {
		Status int
		Code   string
		Fields map[string]string
	}{e.Status, e.Code, e.Fields}
}
