package projection_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/projection"
)

// TestBarrierReadsYourWrites: after Wait, every record produced before it
// is in the projection's table, however slowly the projection applies; a
// projection that is not running makes Wait fail with ErrBehind after the
// barrier's timeout, not pass.
func TestBarrierReadsYourWrites(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	b := projection.NewBarrier(f.pool, f.client(), projection.BarrierConfig{Group: group, Topic: f.topic, Timeout: 500 * time.Millisecond})
	if err := b.Wait(ctx); err != nil {
		t.Fatalf("Wait on an empty topic: %v", err)
	}
	f.produce(batch(5)...)
	if err := b.Wait(ctx); !errors.Is(err, projection.ErrBehind) {
		t.Fatalf("Wait with no projection running: %v, want ErrBehind", err)
	}
	slow := func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
		time.Sleep(30 * time.Millisecond) // a projection that is always a little behind
		return f.apply(ctx, tx, recs)
	}
	f.run(slow)
	for round := range 5 {
		key := fmt.Sprintf("r-%d", round)
		f.produce([2]string{key, "v"})
		if err := b.Wait(ctx); err != nil {
			t.Fatalf("round %d: Wait: %v", round, err)
		}
		if got := f.items(); got[key] != 1 || len(got) != 6+round {
			t.Fatalf("round %d: after Wait the table holds %v, want %s and every earlier key once", round, got, key)
		}
	}
}

// TestBarrierWaitersShareRounds: many concurrent waiters all see their own
// records, and a waiter whose context ends stops waiting with its error.
func TestBarrierWaitersShareRounds(t *testing.T) {
	f := newFixture(t)
	b := projection.NewBarrier(f.pool, f.client(), projection.BarrierConfig{Group: group, Topic: f.topic})
	f.run(f.apply)
	cl := f.client()
	const n = 40
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("w-%02d", i)
			rec := &kgo.Record{Topic: f.topic, Key: []byte(key), Value: []byte("v")}
			if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				errs[i] = err
				return
			}
			if err := b.Wait(context.Background()); err != nil {
				errs[i] = err
				return
			}
			var count int
			if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM items WHERE k = $1`, key).Scan(&count); err != nil || count != 1 {
				errs[i] = fmt.Errorf("%s: %d rows after Wait (%v), want 1", key, count, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on an ended context: %v", err)
	}
}
