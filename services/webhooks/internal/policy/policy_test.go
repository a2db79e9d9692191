package policy

import (
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

func TestMatch(t *testing.T) {
	job := &JobInfo{Queue: "emails", Type: "send"}
	cases := []struct {
		f    Filter
		et   schema.EventType
		job  *JobInfo
		want bool
	}{
		{Filter{}, schema.EventCompleted, nil, true},
		{Filter{EventTypes: []schema.EventType{schema.EventFailed}}, schema.EventCompleted, nil, false},
		{Filter{EventTypes: []schema.EventType{schema.EventFailed, schema.EventCompleted}}, schema.EventCompleted, nil, true},
		{Filter{Queue: "emails"}, schema.EventCompleted, job, true},
		{Filter{Queue: "emails"}, schema.EventCompleted, nil, false},
		{Filter{Queue: "other"}, schema.EventCompleted, job, false},
		{Filter{Queue: "emails", Type: "send"}, schema.EventCompleted, job, true},
		{Filter{Type: "resize"}, schema.EventCompleted, job, false},
	}
	for i, c := range cases {
		if got := c.f.Match(c.et, c.job); got != c.want {
			t.Errorf("case %d: Match = %v, want %v", i, got, c.want)
		}
	}
}

func TestRetryNext(t *testing.T) {
	r := Retry{Schedule: []time.Duration{time.Second, 10 * time.Second}, Jitter: 0.2}
	if r.MaxAttempts() != 3 {
		t.Fatalf("MaxAttempts = %d", r.MaxAttempts())
	}
	for i := 0; i < 100; i++ {
		d, ok := r.Next(2)
		if !ok || d < 8*time.Second || d > 12*time.Second {
			t.Fatalf("Next(2) = %v, %v", d, ok)
		}
	}
	if _, ok := r.Next(3); ok {
		t.Fatal("Next(3) should give up")
	}
	if d, _ := (Retry{Schedule: []time.Duration{time.Second}}).Next(1); d != time.Second {
		t.Fatalf("no jitter: %v", d)
	}
}

func TestClassify(t *testing.T) {
	for status, want := range map[int]Outcome{200: Delivered, 204: Delivered, 0: Failed, 301: Failed, 404: Failed, 410: Gone, 500: Failed} {
		if got := Classify(status); got != want {
			t.Errorf("Classify(%d) = %s, want %s", status, got, want)
		}
	}
}

func TestShouldDisable(t *testing.T) {
	now := time.Now()
	if ShouldDisable(time.Time{}, now, time.Hour) || ShouldDisable(now.Add(-time.Minute), now, time.Hour) {
		t.Fatal("disabled too early")
	}
	if !ShouldDisable(now.Add(-2*time.Hour), now, time.Hour) {
		t.Fatal("not disabled")
	}
}
