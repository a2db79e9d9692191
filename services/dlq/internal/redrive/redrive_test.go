package redrive_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/dlq/internal/redrive"
)

func TestSpecAppliesEdits(t *testing.T) {
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Minute), now.Add(time.Hour)
	orig := schema.JobSpec{Type: "t", Queue: "q", Priority: 2, Payload: json.RawMessage(`{"a":1}`), MaxAttempts: 5, Tags: []string{"x"}, NotAfter: &future}
	three := 3
	for _, tc := range []struct {
		name        string
		edit        redrive.Edit
		notAfter    *time.Time
		wantPayload string
		wantMax     int
		wantNA      bool
	}{
		{"no edit", redrive.Edit{}, &future, `{"a":1}`, 5, true},
		{"payload and budget", redrive.Edit{Payload: json.RawMessage(`{"b":2}`), MaxAttempts: &three}, &future, `{"b":2}`, 3, true},
		{"null payload", redrive.Edit{Payload: json.RawMessage(`null`)}, nil, ``, 5, false},
		{"past deadline dropped", redrive.Edit{}, &past, `{"a":1}`, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := orig
			o.NotAfter = tc.notAfter
			got := redrive.Spec(o, tc.edit, now)
			if string(got.Payload) != tc.wantPayload || got.MaxAttempts != tc.wantMax || (got.NotAfter != nil) != tc.wantNA {
				t.Fatalf("%+v", got)
			}
			if got.Type != "t" || got.Queue != "q" || got.Priority != 2 || len(got.Tags) != 1 {
				t.Fatalf("untouched fields changed: %+v", got)
			}
		})
	}
	if string(orig.Payload) != `{"a":1}` {
		t.Fatal("Spec modified its input")
	}
}

func TestEventIsAFreshAttempt(t *testing.T) {
	now := time.Now()
	e := redrive.Event("acme", "job_dead", "job_new", "key_1", schema.JobSpec{Type: "t", MaxAttempts: 5}, now)
	if e.JobID != "job_new" || e.TenantID != "acme" || e.Attempt != 1 || e.Reason != schema.ReasonRedrive ||
		e.RedrivenFrom != "job_dead" || e.Actor != "key_1" || !e.CreatedAt.Equal(now) || !e.RunAt.Equal(now) || e.History != nil {
		t.Fatalf("%+v", e)
	}
}
