package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/cmd/ferry/internal/cli"
	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/api"
)

// separateReaders runs a stack whose projections each have their own
// consumer group, as separate services do: a second api replica in the
// process (firingAPI) then shares its status projection's group. (A shared
// reader takes its projections before it starts, and a projection must
// never run in the shared reader and in its own group at once.)
var separateReaders = map[string]string{"FERRY_DEV_SHARED_PROJECTIONS": "false"}

// firingAPI runs one more api component over the stack's connections, with
// the schedules firing loop on, until the returned stop is called.
func firingAPI(t *testing.T, e *e2e, grace time.Duration) (stop func()) {
	t.Helper()
	cfg := api.LoadConfig(e.loader)
	cfg.ScheduleFiring, cfg.ScheduleGrace = true, grace
	svc, err := api.New(t.Context(), e.stack.Deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("api: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

func (e *e2e) createSchedule(body map[string]any) string {
	e.t.Helper()
	code, out := e.call("POST", "/v1/schedules", body)
	if code != http.StatusCreated {
		e.t.Fatalf("create schedule %v: %d %v", body, code, out)
	}
	return out["id"].(string)
}

// fire is one enqueued event a schedule made.
type fire struct {
	job         string
	at, created time.Time
}

// fires returns the first-attempt enqueued events of schedule id, by fire
// time, and how many enqueued records each job had.
func fires(rec *recorder, id string) ([]fire, map[string]int) {
	var out []fire
	perJob := map[string]int{}
	for _, ev := range rec.Events() {
		e, ok := ev.Data.(schema.Enqueued)
		if !ok || e.ScheduleID != id {
			continue
		}
		if perJob[e.JobID]++; perJob[e.JobID] == 1 {
			out = append(out, fire{job: e.JobID, at: e.RunAt, created: e.CreatedAt})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out, perJob
}

// TestSchedulesTwoReplicasFireOnce: two api replicas fire the same
// every-second schedules concurrently for several seconds; every fire time
// makes exactly one job, produced once.
func TestSchedulesTwoReplicasFireOnce(t *testing.T) {
	e := startStack(t, separateReaders) // its api fires too
	firingAPI(t, e, 5*time.Second)
	rec := e.record(e.stack.Deps.Topics.Lifecycle(schema.EventEnqueued))
	var ids []string
	for i := range 4 {
		ids = append(ids, e.createSchedule(map[string]any{"name": fmt.Sprintf("tick-%d", i), "cron": "* * * * * *", "job": map[string]any{"type": "noop"}}))
	}
	waitFor(t, 60*time.Second, "6 fires of every schedule", func() bool {
		for _, id := range ids {
			if f, _ := fires(rec, id); len(f) < 6 {
				return false
			}
		}
		return true
	})
	var delays []time.Duration
	for _, id := range ids {
		fs, perJob := fires(rec, id)
		for i, f := range fs {
			if perJob[f.job] != 1 {
				t.Errorf("schedule %s: job %s enqueued %d times", id, f.job, perJob[f.job])
			}
			if i > 0 && !f.at.After(fs[i-1].at) {
				t.Errorf("schedule %s: two jobs (%s, %s) for fire time %s", id, fs[i-1].job, f.job, f.at)
			}
			if f.at.Nanosecond() != 0 {
				t.Errorf("fire time %s is not on a second", f.at)
			}
			delays = append(delays, f.created.Sub(f.at))
		}
		code, sc := e.call("GET", "/v1/schedules/"+id, nil)
		if code != http.StatusOK || sc["last_error"] != "" {
			t.Errorf("schedule %s: %d %v", id, code, sc)
		}
	}
	slices.Sort(delays)
	t.Logf("fire delay over %d fires: p50 %s, p99 %s, max %s", len(delays), delays[len(delays)/2], delays[len(delays)*99/100], delays[len(delays)-1])
}

// TestSchedulesCatchUpAfterRestart: the firing loop stops for several fire
// times and starts again; each schedule catches up as its policy says.
func TestSchedulesCatchUpAfterRestart(t *testing.T) {
	e := startStack(t, map[string]string{"FERRY_SCHEDULES_FIRING": "false", "FERRY_DEV_SHARED_PROJECTIONS": "false"})
	const grace = 300 * time.Millisecond
	stop := firingAPI(t, e, grace)
	rec := e.record(e.stack.Deps.Topics.Lifecycle(schema.EventEnqueued))
	policies := map[string]string{}
	for _, p := range []string{"skip", "one", "all"} {
		policies[p] = e.createSchedule(map[string]any{"name": "every-second-" + p, "cron": "* * * * * *", "catchup": p,
			"catchup_limit": 3, "job": map[string]any{"type": "noop"}})
	}
	waitFor(t, 30*time.Second, "two fires of every schedule", func() bool {
		for _, id := range policies {
			if f, _ := fires(rec, id); len(f) < 2 {
				return false
			}
		}
		return true
	})
	stop()
	stoppedAt := time.Now()
	last := map[string]time.Time{} // the fire time of each schedule's last job before the stop
	for p, id := range policies {
		_, sc := e.call("GET", "/v1/schedules/"+id, nil)
		waitFor(t, 30*time.Second, "the last job before the stop on Kafka", func() bool {
			for _, f := range mustFires(rec, id) {
				if f.job == sc["last_job_id"] {
					last[p] = f.at
					return true
				}
			}
			return false
		})
	}
	// Down for at least four fire times; restart half-way through a second,
	// so that the latest passed fire time is past the grace.
	restart := stoppedAt.Truncate(time.Second).Add(4*time.Second + 500*time.Millisecond)
	time.Sleep(time.Until(restart))
	firingAPI(t, e, grace)
	waitFor(t, 30*time.Second, "a fire after the restart", func() bool {
		for _, id := range policies {
			if f, _ := fires(rec, id); !f[len(f)-1].at.After(restart) {
				return false
			}
		}
		return true
	})
	// The restarted loop claimed the three schedules together: the first
	// job it made for catch-up one tells when (its creation time).
	claimed := time.Time{}
	for _, f := range mustFires(rec, policies["one"]) {
		if f.created.After(restart) && (claimed.IsZero() || f.created.Before(claimed)) {
			claimed = f.created
		}
	}
	latest := claimed.Truncate(time.Second) // the latest fire time passed by then
	want := map[string][]time.Time{
		"one":  {latest},
		"all":  {latest.Add(-2 * time.Second), latest.Add(-time.Second), latest},
		"skip": nil,
	}
	if claimed.Sub(latest) <= grace { // claimed late enough to be on time for the next second
		want["skip"] = []time.Time{latest}
	}
	for p, id := range policies {
		checkCatchUp(t, p, rec, id, last[p], latest, want[p])
	}
}

func mustFires(rec *recorder, id string) []fire {
	f, _ := fires(rec, id)
	return f
}

// checkCatchUp checks that the fires of schedule id for the fire times in
// (lastBefore, latest], which passed while no loop ran, are want.
func checkCatchUp(t *testing.T, policy string, rec *recorder, id string, lastBefore, latest time.Time, want []time.Time) {
	t.Helper()
	fs, perJob := fires(rec, id)
	var got []time.Time
	for _, f := range fs {
		if perJob[f.job] != 1 {
			t.Errorf("%s: job %s enqueued %d times", policy, f.job, perJob[f.job])
		}
		if f.at.After(lastBefore) && !f.at.After(latest) {
			got = append(got, f.at)
		}
	}
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("catch-up %s: fired %v for the fire times in (%s, %s], want %v", policy, got, lastBefore, latest, want)
	}
}

// TestSchedulesOverlapSkip: with overlap skip, a fire while the previous
// run is queued or running makes no job, so runs never overlap.
func TestSchedulesOverlapSkip(t *testing.T) {
	e := startStack(t, nil)
	id := e.createSchedule(map[string]any{"name": "slow", "cron": "@every 1s", "overlap": "skip",
		"job": map[string]any{"type": "sleep", "payload": map[string]any{"ms": 2500}}})
	var sc map[string]any
	waitFor(t, 60*time.Second, "three runs", func() bool {
		_, sc = e.call("GET", "/v1/schedules/"+id, nil)
		return sc["fired"].(float64) >= 3 && sc["skipped"].(float64) >= 3
	})
	e.call("POST", "/v1/schedules/"+id+"/pause", nil)
	_, sc = e.call("GET", "/v1/schedules/"+id, nil)
	fired := int(sc["fired"].(float64))
	// The list reads the status projection, a moment behind the fires.
	var ids []string
	waitFor(t, 30*time.Second, "every fired job listed", func() bool {
		code, list := e.call("GET", "/v1/jobs?limit=100", nil)
		if code != http.StatusOK {
			t.Fatal(code)
		}
		ids = ids[:0]
		for _, j := range list["jobs"].([]any) {
			if j := j.(map[string]any); j["schedule_id"] == id {
				ids = append(ids, j["id"].(string))
			}
		}
		return len(ids) >= fired
	})
	var jobs []map[string]any
	for _, jid := range ids {
		jobs = append(jobs, e.waitStatus(jid, "succeeded", 30*time.Second))
	}
	sort.Slice(jobs, func(i, j int) bool {
		return parseTime(t, jobs[i]["created_at"]).Before(parseTime(t, jobs[j]["created_at"]))
	})
	if len(jobs) < 3 {
		t.Fatalf("%d jobs", len(jobs))
	}
	for i := 1; i < len(jobs); i++ {
		prevDone, created := parseTime(t, jobs[i-1]["finished_at"]), parseTime(t, jobs[i]["created_at"])
		if created.Before(prevDone) {
			t.Errorf("job %v created at %s while %v ran (finished %s)", jobs[i]["id"], created, jobs[i-1]["id"], prevDone)
		}
	}
}

// TestSchedulesCLI drives `ferry schedules` against the real stack.
func TestSchedulesCLI(t *testing.T) {
	e := startStack(t, map[string]string{"FERRY_SCHEDULES_FIRING": "false"})
	env := map[string]string{"FERRY_URL": e.base, "FERRY_API_KEY": e.key}
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := cli.Schedules(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut); code != want {
			t.Fatalf("ferry schedules %v: exit %d, want %d\n%s%s", args, code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	var created map[string]any
	if err := json.Unmarshal([]byte(run(0, "create", "--name", "hourly", "--cron", "0 * * * *", "--timezone", "Europe/Berlin",
		"--type", "noop", "--payload", `{"n":1}`, "--json")), &created); err != nil {
		t.Fatal(err)
	}
	id := created["id"].(string)
	if created["timezone"] != "Europe/Berlin" || len(created["next_fire_times"].([]any)) != 5 {
		t.Fatalf("created %v", created)
	}
	for _, want := range []string{id, "hourly", "0 * * * *"} {
		if out := run(0, "list"); !strings.Contains(out, want) {
			t.Fatalf("list lacks %q:\n%s", want, out)
		}
	}
	if out := run(0, "update", id, "--overlap", "skip", "--catchup", "all", "--catchup-limit", "3"); !strings.Contains(out, "skip") || !strings.Contains(out, "all (limit 3)") {
		t.Fatalf("update:\n%s", out)
	}
	if out := run(0, "pause", id); !strings.Contains(out, "paused:     true") {
		t.Fatalf("pause:\n%s", out)
	}
	run(0, "resume", id)
	var job map[string]any
	if err := json.Unmarshal([]byte(run(0, "trigger", id, "--json")), &job); err != nil || job["schedule_id"] != id {
		t.Fatalf("trigger: %v %v", job, err)
	}
	if out := run(0, "get", id); !strings.Contains(out, job["id"].(string)) || !strings.Contains(out, "fired:") {
		t.Fatalf("get after trigger:\n%s", out)
	}
	if out := run(1, "create", "--name", "bad", "--cron", "* * *", "--type", "noop"); !strings.Contains(out, "invalid_schedule") || !strings.Contains(out, "cron:") {
		t.Fatalf("bad cron:\n%s", out)
	}
	run(2, "create", "--name", "x", "--cron", "@hourly", "--job", `{"type":"noop"}`, "--type", "noop")
	run(0, "delete", id)
	if out := run(1, "get", id); !strings.Contains(out, "not_found") {
		t.Fatalf("get deleted:\n%s", out)
	}
}
