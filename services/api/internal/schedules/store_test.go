package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/testenv"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Pool(t, 8)
	st, err := New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func row(tenant, name string, due *time.Time) Schedule {
	return Schedule{TenantID: tenant, ID: NewID(), Name: name, Cron: "@every 1s", TimeZone: "UTC",
		Template: json.RawMessage(`{"type":"noop"}`), Overlap: OverlapAllow, Catchup: CatchupOne, CatchupLimit: 10,
		NextFireAt: due, DueAt: due}
}

func TestStoreCreateLimitAndTenancy(t *testing.T) {
	st, ctx := newStore(t), context.Background()
	var wg sync.WaitGroup
	type result struct {
		name string
		err  error
	}
	errs := make(chan result, 8)
	for i := range 8 { // concurrent creates never overshoot the limit
		wg.Go(func() {
			name := fmt.Sprintf("s%d", i)
			_, err := st.Create(ctx, row("acme", name, nil), 5, nil)
			errs <- result{name, err}
		})
	}
	wg.Wait()
	close(errs)
	created, tooMany, taken := 0, 0, ""
	for r := range errs {
		switch err := r.err; {
		case err == nil:
			created++
			taken = r.name
		case errors.Is(err, ErrTooMany):
			tooMany++
		default:
			t.Fatal(err)
		}
	}
	if created != 5 || tooMany != 3 {
		t.Fatalf("created %d, refused %d", created, tooMany)
	}
	// Which five won the race varies: reuse the name of one that did.
	if _, err := st.Create(ctx, row("acme", taken, nil), 100, nil); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("same name: %v", err)
	}
	s, err := st.Create(ctx, row("globex", "s0", nil), 5, nil) // names are per tenant
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "acme", s.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another tenant's schedule: %v", err)
	}
	if _, err := st.Change(ctx, "acme", s.ID, func(*Schedule) error { return nil }, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("change another tenant's schedule: %v", err)
	}
	if _, err := st.Delete(ctx, "acme", s.ID, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete another tenant's schedule: %v", err)
	}
}

// TestStoreClaimSkipsLocked: while one claim holds due schedules, a
// concurrent claim gets only the others, never the same row.
func TestStoreClaimSkipsLocked(t *testing.T) {
	st, ctx := newStore(t), context.Background()
	now := time.Now().UTC()
	for i := range 6 {
		due := now.Add(-time.Duration(6-i) * time.Second)
		if _, err := st.Create(ctx, row("acme", fmt.Sprintf("s%d", i), &due), 100, nil); err != nil {
			t.Fatal(err)
		}
	}
	later := now.Add(time.Hour)
	if _, err := st.Create(ctx, row("acme", "later", &later), 100, nil); err != nil {
		t.Fatal(err)
	}
	holding, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var first []string
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := st.Claim(ctx, now, 3, func(_ context.Context, s *Schedule) {
			mu.Lock()
			if first = append(first, s.Name); len(first) == 3 {
				close(holding)
			}
			mu.Unlock()
			<-release
			s.DueAt = &later
		})
		if err != nil {
			t.Error(err)
		}
	})
	<-holding
	var second []string
	n, err := st.Claim(ctx, now, 10, func(_ context.Context, s *Schedule) {
		mu.Lock()
		second = append(second, s.Name)
		mu.Unlock()
		s.DueAt = &later
	})
	close(release)
	wg.Wait()
	if err != nil || n != 3 {
		t.Fatalf("second claim: %d %v", n, err)
	}
	slices.Sort(first)
	slices.Sort(second)
	if fmt.Sprint(first) != "[s0 s1 s2]" || fmt.Sprint(second) != "[s3 s4 s5]" {
		t.Fatalf("first claimed %v, second %v", first, second)
	}
	if n, err := st.Claim(ctx, now, 10, func(context.Context, *Schedule) {}); err != nil || n != 0 {
		t.Fatalf("nothing should be due: %d %v", n, err)
	}
	next, err := st.NextDue(ctx)
	if err != nil || next == nil || !next.Equal(later.Truncate(time.Microsecond)) {
		t.Fatalf("next due %v %v", next, err)
	}
}

// TestStoreListenWakes: a change on one connection wakes a listener.
func TestStoreListenWakes(t *testing.T) {
	st, ctx := newStore(t), context.Background()
	lctx, cancel := context.WithCancel(ctx)
	woke := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() { defer close(done); st.Listen(lctx, func() { woke <- struct{}{} }, testLogger(t)) }()
	defer func() { cancel(); <-done }()
	deadline := time.After(20 * time.Second)
	for { // the listener may not be listening yet: create until it wakes
		if _, err := st.Create(ctx, row("acme", NewID(), nil), 1000, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-woke:
			return
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("no wake-up")
		}
	}
}
