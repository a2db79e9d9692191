package qstore

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestKeyRateLimit: a dispatch rate limit on a concurrency key holds back
// that key's jobs only (burst, then one per refill, in order), while another
// key of the tenant and unkeyed jobs flow; the limit is listed by key with
// the jobs it holds; removing it releases the rest.
func TestKeyRateLimit(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1000)
	b.flow(t0, FlowSettings{KeyRateLimits: map[string]RateLimit{"cust-1": {PerSecond: 5, Burst: 3}}})
	for i := range 8 {
		b.enqueue(t0, enqK("k"+strconv.Itoa(i), "noop", "cust-1", 100))
	}
	b.enqueue(t0, enqK("o1", "noop", "cust-2", 100), enqK("o2", "noop", "cust-2", 100), enqK("plain", "noop", "", 0))
	res := b.dispatch(t0, 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"k0", "k1", "k2", "o1", "o2", "plain"}) {
		t.Fatalf("burst: %v, want the key's burst of 3 and every other job", got)
	}
	if want := t0.Add(200 * time.Millisecond); !res.NextDue.Equal(want) {
		t.Fatalf("next due %v, want the refill at %v", res.NextDue, want)
	}
	rs, err := b.store.RateLimits(b.ctx, "t1")
	if err != nil || len(rs) != 1 || rs[0].Key != "cust-1" || rs[0].Type != "" || rs[0].Waiting != 5 || rs[0].PerSecond != 5 || rs[0].Burst != 3 {
		t.Fatalf("rate limits %+v %v, want cust-1's with 5 waiting", rs, err)
	}
	if got := ids(b.dispatch(t0.Add(199*time.Millisecond), 0).Dispatched); len(got) != 0 {
		t.Fatalf("dispatched %v before the refill", got)
	}
	if got := ids(b.dispatch(t0.Add(200*time.Millisecond), 0).Dispatched); !slices.Equal(got, []string{"k3"}) {
		t.Fatalf("at the refill: %v, want [k3]", got)
	}
	if got := ids(b.dispatch(t0.Add(600*time.Millisecond), 0).Dispatched); !slices.Equal(got, []string{"k4", "k5"}) {
		t.Fatalf("400 ms later: %v, want [k4 k5]", got)
	}
	b.flow(t0.Add(700*time.Millisecond), FlowSettings{})
	if got := ids(b.dispatch(t0.Add(700*time.Millisecond), 0).Dispatched); !slices.Equal(got, []string{"k6", "k7"}) {
		t.Fatalf("after the limit was removed: %v, want [k6 k7]", got)
	}
}

// TestKeyAndTypeRateLimits: a job behind both its type's and its key's
// rate limit takes one token of each per start, never two of one: a job
// that took its type's token and then waited (for its key's token, or for
// a slot of its key) takes no second type token when released; waiting for
// its key's token, it holds its concurrency slot.
func TestKeyAndTypeRateLimits(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1000)
	// The type's bucket barely refills: its tokens count the starts.
	b.flow(t0, FlowSettings{RateLimits: map[string]RateLimit{"api.call": {PerSecond: 0.001, Burst: 10}},
		KeyRateLimits: map[string]RateLimit{"cust-1": {PerSecond: 1, Burst: 1}}})
	b.enqueue(t0, enqK("a", "api.call", "cust-1", 2), enqK("b", "api.call", "cust-1", 2), enqK("c", "api.call", "cust-1", 2))
	first := b.dispatch(t0, 0).Dispatched
	if got := ids(first); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first: %v, want [a]", got)
	}
	// b holds the second slot while it waits for the key's token; c waits
	// for a slot. Each took its type token on the way.
	conc, err := b.store.Concurrency(b.ctx, "t1", "cust-1")
	if err != nil || conc.Running != 2 || conc.Waiting != 1 {
		t.Fatalf("concurrency %+v %v, want a and b holding the 2 slots, c waiting", conc, err)
	}
	typeTokens := func() float64 {
		v, err := b.rdb.HGet(b.ctx, b.store.gateKey("r", "t1", "api.call")+":bucket", "tok").Float64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := ids(b.dispatch(t0.Add(time.Second), 0).Dispatched); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("a second later: %v, want [b]", got)
	}
	if tok := typeTokens(); tok < 7 || tok >= 8 {
		t.Fatalf("type tokens after three jobs passed the type's limit: %v, want 7 (one each)", tok)
	}
	b.complete(t0.Add(time.Second), first...)
	if got := ids(b.dispatch(t0.Add(2*time.Second), 0).Dispatched); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("after a completed and the key refilled: %v, want [c]", got)
	}
	if tok := typeTokens(); tok < 7 || tok >= 8 {
		t.Fatalf("type tokens after c started: %v, want still 7", tok)
	}
}
