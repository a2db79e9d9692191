package ttlcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// store is a loader whose loads can be held, counting them.
type store struct {
	loads atomic.Int64
	value atomic.Int64
	fail  atomic.Bool
	gate  chan struct{} // when not nil, every load waits for it to close
}

var errDown = errors.New("store down")

func (s *store) load(ctx context.Context, key string) (int64, error) {
	s.loads.Add(1)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if s.fail.Load() {
		return 0, errDown
	}
	return s.value.Load(), nil
}

// clock is a settable clock safe to read from the cache's load goroutines.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// newCache returns a cache with a settable clock over a store holding value.
func newCache(t *testing.T, value int64) (*store, *Cache[int64], *clock) {
	t.Helper()
	s := &store{}
	s.value.Store(value)
	clk := &clock{}
	clk.ns.Store(time.Unix(1000, 0).UnixNano())
	c := New(time.Second, s.load)
	c.SetClock(clk.now)
	return s, c, clk
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentMissesShareOneLoad: callers of a key the cache lacks wait
// for one load between them, not one each.
func TestConcurrentMissesShareOneLoad(t *testing.T) {
	s, c, _ := newCache(t, 7)
	s.gate = make(chan struct{})
	const n = 20
	var wg sync.WaitGroup
	got := make([]int64, n)
	for i := range n {
		wg.Go(func() {
			v, err := c.Get(context.Background(), "k")
			if err != nil {
				t.Errorf("get: %v", err)
			}
			got[i] = v
		})
	}
	eventually(t, "the first load", func() bool { return s.loads.Load() == 1 })
	time.Sleep(20 * time.Millisecond) // let the other callers join (they must not start loads)
	close(s.gate)
	wg.Wait()
	if l := s.loads.Load(); l != 1 {
		t.Fatalf("%d loads for %d concurrent misses, want 1", l, n)
	}
	for i, v := range got {
		if v != 7 {
			t.Fatalf("caller %d got %d, want 7", i, v)
		}
	}
}

// TestRefreshAhead: past half its TTL a value is still answered at once
// while one background load replaces it; past the whole TTL it is never
// answered, the caller waits for the load.
func TestRefreshAhead(t *testing.T) {
	s, c, clk := newCache(t, 1)
	ctx := context.Background()
	if v, err := c.Get(ctx, "k"); err != nil || v != 1 {
		t.Fatalf("first get: %d %v", v, err)
	}
	clk.advance(400 * time.Millisecond)
	if v, _ := c.Get(ctx, "k"); v != 1 || s.loads.Load() != 1 {
		t.Fatalf("fresh value: %d after %d loads, want 1 after 1", v, s.loads.Load())
	}
	// Past half the TTL: the old value at once, with a load held behind it.
	s.gate = make(chan struct{})
	s.value.Store(2)
	clk.advance(200 * time.Millisecond)
	for range 5 {
		if v, err := c.Get(ctx, "k"); err != nil || v != 1 {
			t.Fatalf("refresh-ahead get: %d %v, want the cached 1 at once", v, err)
		}
	}
	eventually(t, "the refresh", func() bool { return s.loads.Load() == 2 })
	// Past the whole TTL while the refresh is still held: the caller waits
	// for it and gets the new value, never the expired one.
	clk.advance(500 * time.Millisecond)
	done := make(chan int64)
	go func() { v, _ := c.Get(ctx, "k"); done <- v }()
	select {
	case v := <-done:
		t.Fatalf("an expired value was answered: %d", v)
	case <-time.After(50 * time.Millisecond):
	}
	close(s.gate)
	if v := <-done; v != 2 {
		t.Fatalf("after the refresh: %d, want 2", v)
	}
	if l := s.loads.Load(); l != 2 {
		t.Fatalf("%d loads, want 2 (the refresh shared by every caller)", l)
	}
}

// TestFailedLoads: a failed load answers its error and caches nothing; a
// failed refresh leaves the cached value until its TTL, then the error.
func TestFailedLoads(t *testing.T) {
	s, c, clk := newCache(t, 0)
	s.fail.Store(true)
	ctx := context.Background()
	if _, err := c.Get(ctx, "k"); !errors.Is(err, errDown) {
		t.Fatalf("failed load: %v", err)
	}
	s.fail.Store(false)
	s.value.Store(3)
	if v, err := c.Get(ctx, "k"); err != nil || v != 3 {
		t.Fatalf("after recovery: %d %v", v, err)
	}
	s.fail.Store(true)
	clk.advance(600 * time.Millisecond)
	if v, err := c.Get(ctx, "k"); err != nil || v != 3 {
		t.Fatalf("during a failing refresh: %d %v, want the cached 3", v, err)
	}
	eventually(t, "the failed refresh", func() bool { return s.loads.Load() == 3 })
	clk.advance(500 * time.Millisecond)
	if _, err := c.Get(ctx, "k"); !errors.Is(err, errDown) {
		t.Fatalf("past the TTL with the store down: %v, want its error", err)
	}
}

// TestCallerGoesAway: a caller whose context ends stops waiting; the load
// it started still completes for the others.
func TestCallerGoesAway(t *testing.T) {
	s, c, _ := newCache(t, 5)
	s.gate = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { _, err := c.Get(ctx, "k"); errc <- err }()
	eventually(t, "the load", func() bool { return s.loads.Load() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	close(s.gate)
	if v, err := c.Get(context.Background(), "k"); err != nil || v != 5 {
		t.Fatalf("after the load: %d %v", v, err)
	}
}

// TestUpdate adjusts a cached value until the next load replaces it, and
// leaves a key the cache lacks alone.
func TestUpdate(t *testing.T) {
	_, c, clk := newCache(t, 10)
	ctx := context.Background()
	c.Update("k", func(v int64) int64 { return v + 1 })
	if v, _ := c.Get(ctx, "k"); v != 10 {
		t.Fatalf("update of a missing key applied: %d", v)
	}
	c.Update("k", func(v int64) int64 { return v + 5 })
	if v, _ := c.Get(ctx, "k"); v != 15 {
		t.Fatalf("after update: %d, want 15", v)
	}
	clk.advance(2 * time.Second)
	if v, _ := c.Get(ctx, "k"); v != 10 {
		t.Fatalf("after reload: %d, want the store's 10", v)
	}
}
