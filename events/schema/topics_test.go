package schema

import (
	"slices"
	"testing"
)

func TestTopicsDefaultPrefix(t *testing.T) {
	var topics Topics
	want := []string{
		"ferry.jobs.enqueued", "ferry.jobs.started", "ferry.jobs.progress", "ferry.jobs.completed",
		"ferry.jobs.failed", "ferry.jobs.dlq", "ferry.jobs.cancelled",
	}
	if got := topics.LifecycleTopics(); !slices.Equal(got, want) {
		t.Errorf("LifecycleTopics = %v, want %v", got, want)
	}
	if got := topics.Dispatch(PoolLong); got != "ferry.jobs.dispatch.long" {
		t.Errorf("Dispatch(long) = %q", got)
	}
	if got := topics.Workers(); got != "ferry.workers" {
		t.Errorf("Workers = %q", got)
	}
	all := append(slices.Clone(want), "ferry.jobs.dispatch.short", "ferry.jobs.dispatch.long", "ferry.workers", "ferry.breakers", "ferry.changes")
	if got := topics.All(); !slices.Equal(got, all) {
		t.Errorf("All = %v, want %v", got, all)
	}
	if (Topics{Prefix: DefaultTopicPrefix}).Lifecycle(EventDLQ) != topics.Lifecycle(EventDLQ) {
		t.Error("the zero value and an explicit default prefix disagree")
	}
}

func TestTopicsCustomPrefix(t *testing.T) {
	topics := Topics{Prefix: "acme-prod."}
	if got := topics.Lifecycle(EventCompleted); got != "acme-prod.jobs.completed" {
		t.Errorf("Lifecycle = %q", got)
	}
	if got := topics.Dispatch(PoolShort); got != "acme-prod.jobs.dispatch.short" {
		t.Errorf("Dispatch = %q", got)
	}
	if got := topics.Workers(); got != "acme-prod.workers" {
		t.Errorf("Workers = %q", got)
	}
	all := topics.All()
	if len(all) != len(EventTypes)+len(Pools)+3 { // workers, breakers, changes
		t.Errorf("All has %d topics: %v", len(all), all)
	}
	seen := map[string]bool{}
	for _, tp := range all {
		if seen[tp] {
			t.Errorf("All lists %q twice", tp)
		}
		seen[tp] = true
	}
}

func TestEventTypeOf(t *testing.T) {
	for _, topics := range []Topics{{}, {Prefix: "acme."}} {
		for _, et := range EventTypes {
			got, ok := topics.EventTypeOf(topics.Lifecycle(et))
			if !ok || got != et {
				t.Errorf("prefix %q: EventTypeOf(%q) = %q, %v", topics.Prefix, topics.Lifecycle(et), got, ok)
			}
		}
		for _, tp := range []string{
			topics.Dispatch(PoolShort), topics.Workers(), topics.prefix() + "jobs.", topics.prefix() + "jobs.unknown",
			"other.jobs.completed", "jobs.completed", "", topics.prefix() + "jobs.completed.extra",
		} {
			if et, ok := topics.EventTypeOf(tp); ok {
				t.Errorf("prefix %q: EventTypeOf(%q) = %q, true; want false", topics.Prefix, tp, et)
			}
		}
	}
	// A topic under another prefix is not one of ours.
	if _, ok := (Topics{Prefix: "acme."}).EventTypeOf("ferry.jobs.completed"); ok {
		t.Error("acme. topics claim ferry.jobs.completed")
	}
}

func TestEventTypes(t *testing.T) {
	for _, et := range EventTypes {
		if !et.Valid() {
			t.Errorf("%s is not Valid", et)
		}
		if want := "ferry.job." + string(et) + ".v1"; et.CEType() != want {
			t.Errorf("%s.CEType() = %q, want %q", et, et.CEType(), want)
		}
	}
	for _, bad := range []EventType{"", "dispatch", "Completed", "ferry.job.completed.v1"} {
		if bad.Valid() {
			t.Errorf("%q is Valid", bad)
		}
	}
	for _, c := range []ErrorClass{ClassAppError, ClassRetryable, ClassPermanent, ClassTimeout, ClassWorkerLost, ClassExpired, ClassCancelled} {
		if !c.Valid() {
			t.Errorf("class %q is not Valid", c)
		}
	}
	if ErrorClass("oops").Valid() || ErrorClass("").Valid() {
		t.Error("unknown class is Valid")
	}
}
