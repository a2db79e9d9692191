package api

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api/internal/schedules"
)

// TestRefireMakesTheSameJob: firing a fire time again, as a replica does
// when the one that fired it died before committing, answers with the same
// job, even after Redis forgot the key and after the template changed.
func TestRefireMakesTheSameJob(t *testing.T) {
	ctx := context.Background()
	deps := testenv.Open(t, testenv.Common(t, Needs), Needs)
	testenv.Tenant(t, deps.Postgres, "acme")
	s, err := New(ctx, deps, Config{})
	if err != nil {
		t.Fatal(err)
	}
	sc := schedules.Schedule{TenantID: "acme", ID: schedules.NewID(), Template: json.RawMessage(`{"type":"noop"}`)}
	at := time.Now().UTC().Truncate(time.Second)
	fire := func() string {
		t.Helper()
		jobs, err := s.submitFires(ctx, &sc, []time.Time{at}, false)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("fire: %v %v", jobs, err)
		}
		return jobs[0].ID
	}
	first := fire()
	want, _ := fireOf(sc.ID, at, false)
	if first != want.jobID {
		t.Fatalf("job %s, want the derived id %s", first, want.jobID)
	}
	if again := fire(); again != first {
		t.Fatalf("re-fire made job %s, want %s", again, first)
	}
	if err := deps.Redis.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if again := fire(); again != first {
		t.Fatalf("re-fire after a Redis flush made job %s, want %s", again, first)
	}
	sc.Template = json.RawMessage(`{"type":"noop","priority":1}`)
	if again := fire(); again != first {
		t.Fatalf("re-fire after a template change made job %s, want %s", again, first)
	}
	other, _ := fireOf(sc.ID, at.Add(time.Second), false)
	trig, _ := fireOf(sc.ID, at, true)
	// Ids differ per fire and carry the fire time's milliseconds first.
	if other.jobID == first || trig.jobID == first || trig.jobID[:17] != first[:17] {
		t.Fatalf("ids of other fires: %s %s (first %s)", other.jobID, trig.jobID, first)
	}
}
