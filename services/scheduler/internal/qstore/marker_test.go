package qstore

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// TestTerminalMarkerIsSmall: a finished job leaves a marker of its state
// and tenant only, listpack-encoded, with the terminal TTL, a fraction of
// the memory its hash took while it ran. The job's own hash turns
// hashtable-encoded once it holds a spec over hash-max-listpack-value and
// never shrinks back, so a marker written into it kept ~1.2 KB per finished
// job in Redis for the terminal TTL (days): after the benchmark's 130,000
// jobs Redis held ~200 MB, and each AOF rewrite forked and copied all of it
// while the next workload ran. Late and replayed events of the job still
// change nothing.
func TestTerminalMarkerIsSmall(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 10)
	e := enq("j", 1, "default", 5, t0)
	e.Job.Payload = []byte(`{"text":"` + strings.Repeat("x", listpackValueLimit(t, b)+200) + `"}`) // a spec over hash-max-listpack-value
	e.History = []schema.Attempt{{Attempt: 1, Class: schema.ClassAppError, Error: "boom"}}
	b.enqueue(t0, e)
	key := b.store.Prefix() + "job:j"
	d := b.dispatch(t0, 0).Dispatched[0]
	if enc := b.rdb.ObjectEncoding(b.ctx, key).Val(); enc != "hashtable" {
		t.Fatalf("a running job's hash is %q: the test needs a spec that makes it a hashtable", enc)
	}
	running := b.rdb.MemoryUsage(b.ctx, key).Val()

	b.apply(t0, func(batch *Batch) { batch.Extend("j", d.DispatchID); batch.Complete("j", "t1", d.DispatchID) })
	b.wantMarker(t, "j", "done", "t1")
	if done := b.rdb.MemoryUsage(b.ctx, key).Val(); done*4 > running {
		t.Errorf("the marker takes %d bytes, the running job took %d: want at most a quarter", done, running)
	}

	// Late and replayed events of the job change nothing.
	r := b.apply(t0.Add(time.Second), func(batch *Batch) {
		_ = batch.Enqueue(e, t0)
		batch.Extend("j", d.DispatchID)
		batch.Fail("j", d.DispatchID, schema.ClassAppError)
		batch.Complete("j", "t1", d.DispatchID)
		batch.Cancel("j", "t1")
		batch.Trace(e.JobRef, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	})
	if len(r.Failed) != 0 || len(r.Superseded) != 0 {
		t.Fatalf("events of a done job decided: %+v", r)
	}
	if res := b.dispatch(t0.Add(time.Second), 0); len(res.Dispatched) != 0 {
		t.Fatalf("done job dispatched again: %v", ids(res.Dispatched))
	}
	b.wantMarker(t, "j", "done", "t1")
}

// TestCancelledAndDeadMarkers: cancelled (queued, or running and then
// reported) and dead jobs get the same small marker, with their tenant.
func TestCancelledAndDeadMarkers(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 10)
	b.enqueue(t0, enq("run", 1, "default", 0, t0))
	d := b.dispatch(t0, 0).Dispatched[0]
	b.enqueue(t0, enq("queued", 1, "default", 5, t0.Add(time.Minute)))
	b.apply(t0, func(batch *Batch) { batch.Cancel("run", "t1"); batch.Cancel("queued", "t1") })
	b.wantMarker(t, "queued", "cancelled", "t1")
	b.apply(t0, func(batch *Batch) { batch.Fail("run", d.DispatchID, schema.ClassCancelled) })
	b.wantMarker(t, "run", "cancelled", "t1")

	e := enq("exp", 1, "default", 5, t0)
	na := t0.Add(-time.Second)
	e.Job.NotAfter = &na
	b.enqueue(t0, e)
	if res := b.dispatch(t0, 0); len(res.Expired) != 1 {
		t.Fatalf("expired %v", ids(res.Expired))
	}
	b.apply(t0, func(batch *Batch) { batch.AckExpired(schema.PoolShort, "exp") })
	b.wantMarker(t, "exp", "dead", "t1")
}

// wantMarker checks that job id's key is a terminal marker: exactly state
// and tenant, listpack-encoded, expiring after the terminal TTL.
func (b *bundle) wantMarker(t *testing.T, id, state, tenant string) {
	t.Helper()
	key := b.store.Prefix() + "job:" + id
	got := b.rdb.HGetAll(b.ctx, key).Val()
	if want := map[string]string{"state": state, "tenant": tenant}; !maps.Equal(got, want) {
		t.Errorf("%s: marker %v, want %v", id, got, want)
	}
	if enc := b.rdb.ObjectEncoding(b.ctx, key).Val(); enc != "listpack" {
		t.Errorf("%s: marker encoded as %q, want listpack", id, enc)
	}
	ttl := b.rdb.TTL(b.ctx, key).Val()
	if ttl <= DefaultTerminalTTL-time.Minute || ttl > DefaultTerminalTTL {
		t.Errorf("%s: marker TTL %v, want the terminal TTL %v", id, ttl, DefaultTerminalTTL)
	}
}

// listpackValueLimit is the server's hash-max-listpack-value: a hash with a
// longer value is a hash table (Ferry's Redis runs with 4096, Redis's
// default is 64).
func listpackValueLimit(t *testing.T, b *bundle) int {
	t.Helper()
	v, err := b.rdb.ConfigGet(b.ctx, "hash-max-listpack-value").Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(v["hash-max-listpack-value"])
	if err != nil {
		t.Fatalf("hash-max-listpack-value %v: %v", v, err)
	}
	return n
}
