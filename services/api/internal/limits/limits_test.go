package limits_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api/internal/limits"
)

func client(t *testing.T) *redis.Client {
	opts, err := redis.ParseURL(testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// TestTakeAllOrNothing: a take of n tokens succeeds whole or not at all,
// and says how long until it would.
func TestTakeAllOrNothing(t *testing.T) {
	ctx, rdb := context.Background(), client(t)
	d, err := limits.Take(ctx, rdb, "t1", 10, 5, 4)
	if err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("first take: %+v %v", d, err)
	}
	d, err = limits.Take(ctx, rdb, "t1", 10, 5, 3)
	if err != nil || d.Allowed || d.RetryAfter < 100*time.Millisecond || d.RetryAfter > 250*time.Millisecond {
		t.Fatalf("second take: %+v %v (want refused, ~200ms)", d, err)
	}
	// The refused take cost nothing: one token is still there.
	if d, _ := limits.Take(ctx, rdb, "t1", 10, 5, 1); !d.Allowed {
		t.Fatalf("single token: %+v", d)
	}
	// Other tenants have their own bucket.
	if d, _ := limits.Take(ctx, rdb, "t2", 10, 5, 5); !d.Allowed {
		t.Fatalf("other tenant: %+v", d)
	}
	time.Sleep(300 * time.Millisecond)
	if d, _ := limits.Take(ctx, rdb, "t1", 10, 5, 3); !d.Allowed {
		t.Fatalf("after refill: %+v", d)
	}
}

// TestTakeConcurrent: concurrent callers never take more than the burst.
func TestTakeConcurrent(t *testing.T) {
	ctx, rdb := context.Background(), client(t)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := limits.Take(ctx, rdb, "c", 0.001, 20, 1)
			if err != nil {
				t.Error(err)
			}
			if d.Allowed {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 20 {
		t.Fatalf("%d of 50 takes allowed, want the burst of 20", ok.Load())
	}
}
