package status

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func ref(attempt int) schema.JobRef {
	return schema.JobRef{JobID: "job_1", TenantID: "acme", Attempt: attempt}
}

func ev(at time.Duration, d schema.Data) schema.Event {
	m := schema.Meta{ID: schema.NewEventID(), Type: d.CEType(), Time: t0.Add(at), Subject: d.Subject(), Tenant: d.Tenant()}
	if _, ok := d.(schema.Enqueued); ok {
		m.TraceParent = traceparent
	}
	return schema.Event{Meta: m, Data: d}
}

func spec() schema.JobSpec {
	return schema.JobSpec{Type: "email.send", Queue: "default", Priority: 5, Payload: json.RawMessage(`{"to":"a@b.c"}`),
		MaxAttempts: 5, Tags: []string{"x"}, Pool: "short"}
}

// history is a job that fails its first attempt and succeeds its second.
func history() []schema.Event {
	return []schema.Event{
		ev(0, schema.Enqueued{JobRef: ref(1), Job: spec(), CreatedAt: t0, RunAt: t0, Reason: schema.ReasonSubmitted, IdempotencyKey: "k", RequestHash: "h",
			Unique: &schema.Unique{Key: "u", While: schema.UniqueUntilDone, Until: t0.Add(time.Hour)}, ScheduleID: "sch_1"}),
		ev(1*time.Second, schema.Started{JobRef: ref(1), WorkerID: "w1", StartedAt: t0.Add(time.Second)}),
		ev(2*time.Second, schema.Progress{JobRef: ref(1), WorkerID: "w1", Percent: 10, Message: "a", At: t0.Add(2 * time.Second)}),
		ev(3*time.Second, schema.Progress{JobRef: ref(1), WorkerID: "w1", Percent: 50, Message: "b", At: t0.Add(3 * time.Second)}),
		ev(4*time.Second, schema.Failed{JobRef: ref(1), WorkerID: "w1", Error: schema.ErrorInfo{Class: schema.ClassAppError, Message: "boom"},
			StartedAt: t0.Add(time.Second), FinishedAt: t0.Add(4 * time.Second)}),
		ev(5*time.Second, schema.Enqueued{JobRef: ref(2), Job: spec(), CreatedAt: t0, RunAt: t0.Add(10 * time.Second), Reason: schema.ReasonRetry}),
		ev(10*time.Second, schema.Started{JobRef: ref(2), WorkerID: "w2", StartedAt: t0.Add(10 * time.Second)}),
		ev(12*time.Second, schema.Completed{JobRef: ref(2), WorkerID: "w2", Result: json.RawMessage(`{"ok":true}`),
			StartedAt: t0.Add(10 * time.Second), FinishedAt: t0.Add(12 * time.Second)}),
	}
}

func fold(evs []schema.Event) Row {
	var r Row
	for _, e := range evs {
		Apply(&r, e)
	}
	return r
}

func permute(evs []schema.Event, f func([]schema.Event)) {
	var rec func(k int)
	rec = func(k int) {
		if k == len(evs) {
			f(evs)
			return
		}
		for i := k; i < len(evs); i++ {
			evs[k], evs[i] = evs[i], evs[k]
			rec(k + 1)
			evs[k], evs[i] = evs[i], evs[k]
		}
	}
	rec(0)
}

func TestInOrder(t *testing.T) {
	r := fold(history())
	if r.Status() != schema.StatusSucceeded || r.Pos != (schema.Position{Attempt: 2, Phase: schema.PhaseSucceeded}) {
		t.Fatalf("status %s pos %+v", r.Status(), r.Pos)
	}
	if r.Type != "email.send" || string(r.Payload) != `{"to":"a@b.c"}` || r.IdempotencyKey != "k" || r.RequestHash != "h" || r.ScheduleID != "sch_1" || !r.CreatedAt.Equal(t0) {
		t.Fatalf("spec not applied: %+v", r)
	}
	if r.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("trace id %q", r.TraceID)
	}
	if r.WorkerID != "w2" || !r.StartedAt.Equal(t0.Add(10*time.Second)) || !r.FinishedAt.Equal(t0.Add(12*time.Second)) {
		t.Fatalf("run: %+v", r)
	}
	if *r.ProgressPercent != 50 || r.ProgressMessage != "b" || r.LastErrorClass != "app_error" || string(r.Result) != `{"ok":true}` {
		t.Fatalf("progress/error/result: %+v", r)
	}
	if !r.ScheduledFor.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("scheduled_for %v", r.ScheduledFor)
	}
}

// TestEveryPermutation folds every order of the history, with every event
// also delivered twice, and expects the same row.
func TestEveryPermutation(t *testing.T) {
	want := fold(history())
	n := 0
	permute(history(), func(evs []schema.Event) {
		n++
		got := fold(evs)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("order %v:\n got %+v\nwant %+v", names(evs), got, want)
		}
	})
	if n != 40320 {
		t.Fatalf("ran %d permutations", n)
	}
	// Duplicates, shuffled.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		evs := append(history(), history()...)
		rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
		if got := fold(evs); !reflect.DeepEqual(got, want) {
			t.Fatalf("order %v:\n got %+v\nwant %+v", names(evs), got, want)
		}
	}
}

// TestPrefixes checks the intermediate statuses of an in-order delivery.
func TestPrefixes(t *testing.T) {
	want := []schema.Status{schema.StatusQueued, schema.StatusRunning, schema.StatusRunning, schema.StatusRunning,
		schema.StatusScheduled, schema.StatusScheduled, schema.StatusRunning, schema.StatusSucceeded}
	var r Row
	for i, e := range history() {
		Apply(&r, e)
		if r.Status() != want[i] {
			t.Fatalf("after event %d: %s, want %s", i, r.Status(), want[i])
		}
	}
	// The retry's run_at passed long ago: the row reads as queued now.
	r = fold(history()[:6])
	if got := r.Effective(t0.Add(time.Hour)); got != schema.StatusQueued {
		t.Fatalf("effective %s", got)
	}
	if got := r.Effective(t0.Add(6 * time.Second)); got != schema.StatusScheduled {
		t.Fatalf("effective %s", got)
	}
}

func TestCancelRacingCompletion(t *testing.T) {
	evs := []schema.Event{
		history()[0], history()[1],
		ev(3*time.Second, schema.Cancelled{JobRef: ref(1), Reason: "user", Actor: "key_1", At: t0.Add(3 * time.Second)}),
		ev(4*time.Second, schema.Completed{JobRef: ref(1), WorkerID: "w1", StartedAt: t0.Add(time.Second), FinishedAt: t0.Add(4 * time.Second)}),
	}
	permute(evs, func(evs []schema.Event) {
		r := fold(evs)
		if r.Status() != schema.StatusSucceeded || !r.FinishedAt.Equal(t0.Add(4*time.Second)) {
			t.Fatalf("order %v: %s %v", names(evs), r.Status(), r.FinishedAt)
		}
	})
	// A cancel of a queued job, then the worker's cancelled failure: cancelled wins.
	evs = []schema.Event{
		history()[0], history()[1],
		ev(3*time.Second, schema.Cancelled{JobRef: ref(1), Reason: "user", At: t0.Add(3 * time.Second)}),
		ev(4*time.Second, schema.Failed{JobRef: ref(1), WorkerID: "w1", Error: schema.ErrorInfo{Class: schema.ClassCancelled, Message: "cancelled"}, StartedAt: t0.Add(time.Second), FinishedAt: t0.Add(4 * time.Second)}),
	}
	permute(evs, func(evs []schema.Event) {
		r := fold(evs)
		if r.Status() != schema.StatusCancelled || !r.FinishedAt.Equal(t0.Add(3*time.Second)) {
			t.Fatalf("order %v: %s %v", names(evs), r.Status(), r.FinishedAt)
		}
	})
}

func TestDeadLetter(t *testing.T) {
	evs := append(history()[:5], ev(5*time.Second, schema.DeadLettered{JobRef: ref(1), Job: spec(), CreatedAt: t0,
		Error: schema.ErrorInfo{Class: schema.ClassPermanent, Message: "bad"}, DeadAt: t0.Add(5 * time.Second)}))
	want := fold(evs)
	if want.Status() != schema.StatusDead || want.LastErrorClass != "permanent" || !want.FinishedAt.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("%+v", want)
	}
	permute(evs, func(evs []schema.Event) {
		if got := fold(evs); !reflect.DeepEqual(got, want) {
			t.Fatalf("order %v:\n got %+v\nwant %+v", names(evs), got, want)
		}
	})
}

func TestApplyReportsChange(t *testing.T) {
	var r Row
	e := history()[0]
	if !Apply(&r, e) {
		t.Fatal("first apply reported no change")
	}
	if Apply(&r, e) {
		t.Fatal("duplicate reported a change")
	}
}

func names(evs []schema.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		lc := e.Data.(schema.Lifecycle)
		out[i] = string(lc.EventType()) + "#" + string(rune('0'+lc.Ref().Attempt))
	}
	return out
}

// TestHoldsUnique: along a job that fails its first attempt, waits for its
// retry and succeeds, each state of a unique key holds exactly where it
// should, never past the key's end, and the key (from the first enqueued
// event) survives the retry's enqueued event, which carries none.
func TestHoldsUnique(t *testing.T) {
	h := history()
	// Prefix length → holds for queued, active, until_done.
	want := map[int][3]bool{
		1: {true, true, true},    // enqueued, waiting for its first attempt
		2: {false, true, true},   // running attempt 1
		5: {false, false, true},  // attempt 1 failed
		6: {false, false, true},  // retry enqueued: waiting out the backoff
		7: {false, true, true},   // running attempt 2
		8: {false, false, false}, // succeeded
	}
	for n, w := range want {
		r := fold(h[:n])
		if r.UniqueKey != "u" {
			t.Fatalf("after %d events: unique key %q", n, r.UniqueKey)
		}
		for i, while := range []string{schema.UniqueQueued, schema.UniqueActive, schema.UniqueUntilDone} {
			r.UniqueWhile = while
			if got := r.HoldsUnique(t0); got != w[i] {
				t.Errorf("after %d events, while %s: holds %v, want %v", n, while, got, w[i])
			}
			if r.HoldsUnique(t0.Add(time.Hour)) {
				t.Errorf("after %d events, while %s: holds at its end", n, while)
			}
		}
	}
	if r := fold(h[:1]); (&Row{Pos: r.Pos}).HoldsUnique(t0) {
		t.Error("a job without a unique key holds one")
	}
}

// TestEqualSeesEveryField changes one field of a row at a time and expects
// equal to tell the rows apart, so a field added to Row without a line in
// equal fails here instead of a change going unwritten.
func TestEqualSeesEveryField(t *testing.T) {
	rt := reflect.TypeOf(Row{})
	for i := 0; i < rt.NumField(); i++ {
		var a, b Row
		reflect.ValueOf(&b).Elem().Field(i).Set(nonZero(t, rt.Field(i).Type))
		if a.equal(&b) || b.equal(&a) {
			t.Errorf("equal misses field %s", rt.Field(i).Name)
		}
		c := b
		if !b.equal(&c) {
			t.Errorf("a row with %s set is not equal to its copy", rt.Field(i).Name)
		}
	}
	empty := Row{Tags: []string{}, Payload: json.RawMessage{}, Result: json.RawMessage{}}
	if !empty.equal(&Row{}) {
		t.Error("empty slices and nil differ")
	}
}

// nonZero returns a value of type typ other than its zero value.
func nonZero(t *testing.T, typ reflect.Type) reflect.Value {
	if typ == reflect.TypeOf(time.Time{}) {
		return reflect.ValueOf(time.Unix(1, 0).UTC())
	}
	v := reflect.New(typ).Elem()
	switch typ.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint8:
		v.SetUint(1)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Float64:
		v.SetFloat(1)
	case reflect.Slice:
		v = reflect.Append(v, nonZero(t, typ.Elem()))
	case reflect.Pointer:
		v = reflect.New(typ.Elem())
	case reflect.Struct:
		for i := 0; i < typ.NumField(); i++ {
			v.Field(i).Set(nonZero(t, typ.Field(i).Type))
		}
	default:
		t.Fatalf("nonZero: no value for %s", typ)
	}
	return v
}

// TestEventsWithoutSpecReadOnlyTheState holds Apply to what CarriesSpec
// promises the store's partial loads: an event without a specification,
// folded into any row of history's prefixes, changes no specification
// field but a spec-less row's CreatedAt, and gives the same row whether the
// specification (but for SpecAttempt, CreatedAt and Queue) was read or not.
func TestEventsWithoutSpecReadOnlyTheState(t *testing.T) {
	partial := func(r Row) Row {
		p := Row{TenantID: r.TenantID, ID: r.ID, SpecAttempt: r.SpecAttempt, CreatedAt: r.CreatedAt, Queue: r.Queue}
		p.EnqAttempt, p.ScheduledFor, p.Delayed, p.Pos = r.EnqAttempt, r.ScheduledFor, r.Delayed, r.Pos
		p.RunAttempt, p.StartedAt, p.WorkerID, p.FinishedAt, p.Result = r.RunAttempt, r.StartedAt, r.WorkerID, r.FinishedAt, r.Result
		p.ProgressAttempt, p.ProgressAt, p.ProgressPercent, p.ProgressMessage = r.ProgressAttempt, r.ProgressAt, r.ProgressPercent, r.ProgressMessage
		p.ErrorRank, p.LastErrorClass, p.LastErrorMessage = r.ErrorRank, r.LastErrorClass, r.LastErrorMessage
		return p
	}
	evs := history()
	evs = append(evs, ev(13*time.Second, schema.Cancelled{JobRef: ref(2), At: t0.Add(13 * time.Second)}))
	checked := 0
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		order := append([]schema.Event(nil), evs...)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for n := range len(order) {
			before := fold(order[:n])
			for _, e := range evs {
				if CarriesSpec(e) {
					continue
				}
				full, part := before, partial(before)
				Apply(&full, e)
				Apply(&part, e)
				if !full.SameSpec(&before) || (before.SpecAttempt != 0 && !full.CreatedAt.Equal(before.CreatedAt)) {
					t.Fatalf("%s after %v changed the specification:\n before %+v\n after  %+v", e.Type, names(order[:n]), before, full)
				}
				if want := partial(full); !reflect.DeepEqual(part, want) {
					t.Fatalf("%s after %v, from the state alone:\n got  %+v\n want %+v", e.Type, names(order[:n]), part, want)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("checked nothing")
	}
	for _, e := range evs {
		if _, spec := e.Data.(schema.Enqueued); spec != CarriesSpec(e) {
			t.Fatalf("CarriesSpec(%s) = %v", e.Type, CarriesSpec(e))
		}
	}
	if !CarriesSpec(ev(0, schema.DeadLettered{JobRef: ref(1), Job: spec()})) {
		t.Fatal("a dead-lettered event carries the specification")
	}
}
