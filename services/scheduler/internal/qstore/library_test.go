package qstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/events/schema"
)

// TestCallsShareNoState: the library's functions share the helpers'
// locals, so each call must start from nothing done or read. Two stores
// under different prefixes take turns: one learns a long run time for its
// tenant's job type and indexes the tenant's queue; the other, called in
// between with the same tenant, queue and type, must still index its own
// queue (its job is dispatched) and charge its own estimate (the default,
// not what the first store learnt).
func TestCallsShareNoState(t *testing.T) {
	ctx := context.Background()
	rdb, a := openStore(t, Options{Lease: 10 * time.Second, Prefix: "libA:"})
	b := New(rdb, Options{Lease: 10 * time.Second, Prefix: "libB:"}) // the same database
	if err := b.SetEpoch(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{a, b} {
		var w Batch
		w.Worker(schema.WorkerStatus{WorkerID: "w1", Pool: schema.PoolShort, Slots: 10, At: t0}, t0.Add(time.Hour))
		mustApply(t, s, &w)
	}
	// a: a job of t1/noop runs for 30 s, so its estimate grows past the default.
	first := enqueueAndDispatch(t, a, "a1")
	var done Batch
	done.Usage(first.JobID, first.DispatchID, t0, t0.Add(30*time.Second))
	done.Complete(first.JobID, first.TenantID, first.DispatchID)
	mustApply(t, a, &done)
	learnt := enqueueAndDispatch(t, a, "a2")

	// b, right after a's calls: the same tenant, queue and type.
	got := enqueueAndDispatch(t, b, "b1")
	est := func(prefix, id string) string {
		v, err := rdb.HGet(ctx, prefix+"job:"+id, "est").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// 1000: the default estimate (1 s).
	if got := est("libA:", learnt.JobID); got == "1000" {
		t.Errorf("libA: charged the default estimate after a 30 s run")
	}
	if got := est("libB:", got.JobID); got != "1000" {
		t.Errorf("libB: charged estimate %q, want the default 1000 (libA's learnt estimate leaked into its call)", got)
	}
}

// TestFunctionsReloadWhenRedisLostThem: a Redis that lost the library
// (FUNCTION DELETE here; a restart without persistence alike) gets it again
// from the first call that misses it: a single apply, a pipelined apply
// of several calls, and a dispatch step.
func TestFunctionsReloadWhenRedisLostThem(t *testing.T) {
	ctx := context.Background()
	rdb, s := openStore(t, Options{Lease: 10 * time.Second, Prefix: "libReload:", MaxOpsPerCall: 2})
	drop := func() {
		t.Helper()
		err := rdb.FunctionDelete(ctx, libraryName).Err()
		if err != nil && !strings.Contains(err.Error(), "not exist") {
			t.Fatal(err)
		}
	}
	drop()
	var w Batch
	w.Worker(schema.WorkerStatus{WorkerID: "w1", Pool: schema.PoolShort, Slots: 10, At: t0}, t0.Add(time.Hour))
	mustApply(t, s, &w) // one call
	drop()
	var jobs Batch
	for i := range 5 {
		if err := jobs.Enqueue(enq(fmt.Sprintf("r%d", i), 1, "default", 5, time.Time{}), t0); err != nil {
			t.Fatal(err)
		}
	}
	mustApply(t, s, &jobs) // three pipelined calls
	drop()
	res, err := s.Dispatch(ctx, DispatchParams{Pool: schema.PoolShort, Now: t0, MaxBatch: 512, DispatchIDPrefix: "d"})
	if err != nil || len(res.Dispatched) != 5 {
		t.Fatalf("dispatched %d of 5: %v", len(res.Dispatched), err)
	}
	if err := rdb.FCall(ctx, dispatchScript.fn, nil, s.dispatchArgs(DispatchParams{Pool: schema.PoolShort, Now: t0,
		MaxBatch: 1, DispatchIDPrefix: "e"}, true)...).Err(); err != nil && err != redis.Nil {
		t.Fatalf("the library is not loaded after the calls: %v", err)
	}
}

// evalSource is script j as one EVAL chunk (the helpers, its source and
// the call of its entry), for the tests that count what a call does.
func (j jobScript) evalSource() string {
	return prelude + j.src + "\nreturn " + j.entry + "(ARGV)\n"
}

func mustApply(t *testing.T, s *Store, b *Batch) {
	t.Helper()
	if _, err := s.Apply(context.Background(), t0, b); err != nil {
		t.Fatal(err)
	}
}

// enqueueAndDispatch enqueues job id (tenant t1, queue default, type noop)
// in s and dispatches it in one step.
func enqueueAndDispatch(t *testing.T, s *Store, id string) Template {
	t.Helper()
	var e Batch
	if err := e.Enqueue(enq(id, 1, "default", 5, time.Time{}), t0); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, &e)
	res, err := s.Dispatch(context.Background(), DispatchParams{Pool: schema.PoolShort, Now: t0, MaxBatch: 512, DispatchIDPrefix: "d-" + id})
	if err != nil || len(res.Dispatched) != 1 || res.Dispatched[0].JobID != id {
		t.Fatalf("%s: dispatched %v: %v", id, ids(res.Dispatched), err)
	}
	return res.Dispatched[0]
}

// TestLoadDropsOtherVersions: a scheduler that starts removes the library
// of another version and keeps its own; a library of another name stays.
func TestLoadDropsOtherVersions(t *testing.T) {
	ctx := context.Background()
	rdb, s := openStore(t, Options{Lease: 10 * time.Second, Prefix: "libDrop:"})
	old := libraryPrefix + "0000000000000000"
	other := "someone_elses_lib"
	for _, name := range []string{old, other} {
		code := "#!lua name=" + name + "\nredis.register_function('" + name + "_f', function() return 1 end)"
		if err := rdb.FunctionLoadReplace(ctx, code).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { rdb.FunctionDelete(ctx, other) })
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range libs {
		have[l.Name] = true
	}
	if have[old] || !have[libraryName] || !have[other] {
		t.Errorf("libraries after Load: %v; want %s and %s, not %s", have, libraryName, other, old)
	}
}

// TestConcurrentLoadsDropOtherVersions: schedulers of one version starting
// together all start, though each finds another version's library and only
// one of them removes it (Redis answers the others "Library not found").
func TestConcurrentLoadsDropOtherVersions(t *testing.T) {
	ctx := context.Background()
	rdb, s := openStore(t, Options{Lease: 10 * time.Second, Prefix: "libRace:"})
	for round := range 5 {
		old := fmt.Sprintf("%s%016d", libraryPrefix, round+1)
		code := "#!lua name=" + old + "\nredis.register_function('" + old + "_f', function() return 1 end)"
		if err := rdb.FunctionLoadReplace(ctx, code).Err(); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 8)
		for range cap(errs) {
			go func() { errs <- s.Load(ctx) }()
		}
		for range cap(errs) {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: a concurrent Load failed: %v", round, err)
			}
		}
	}
}
