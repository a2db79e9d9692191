package limits

import (
	"context"
	"sync"
	"time"
)

// Queues bounds the distinct queues a tenant has live (with unfinished
// jobs). The live set comes from a loader (the projection's per-queue
// counts), cached for a short TTL; names this replica admitted recently are
// added for Hold, because the projection sees a job a little after it is
// accepted and a flood of new names must not slip through that gap. Other
// replicas' recent admissions are seen once projected, so the bound may be
// exceeded by about what all replicas admit within the projection's lag.
type Queues struct {
	load func(ctx context.Context, tenant string) (map[string]bool, error)
	ttl  time.Duration
	hold time.Duration
	now  func() time.Time

	mu sync.Mutex
	m  map[string]*tenantQueues
}

type tenantQueues struct {
	live   map[string]bool // queue known to the projection → has unfinished jobs
	loaded time.Time
	recent map[string]time.Time // admitted by this replica, not yet seen projected → when
}

// NewQueues returns a Queues over load, which returns the tenant's queues
// the projection knows, each with whether it has unfinished jobs; ttl
// defaults to 1s, hold to 1m.
func NewQueues(ttl, hold time.Duration, load func(ctx context.Context, tenant string) (map[string]bool, error)) *Queues {
	if ttl <= 0 {
		ttl = time.Second
	}
	if hold <= 0 {
		hold = time.Minute
	}
	return &Queues{load: load, ttl: ttl, hold: hold, now: time.Now, m: map[string]*tenantQueues{}}
}

// Check returns the names of qs the tenant does not have live yet and how
// many queues it would have live once they are added. The caller refuses
// the request when that exceeds its limit, and otherwise calls Note with
// the new names once the jobs are accepted.
func (q *Queues) Check(ctx context.Context, tenant string, qs []string) (fresh []string, total int, err error) {
	t, err := q.tenant(ctx, tenant)
	if err != nil {
		return nil, 0, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	known := 0
	for _, live := range t.live {
		if live {
			known++
		}
	}
	for n, at := range t.recent {
		if now.Sub(at) > q.hold {
			delete(t.recent, n)
		} else {
			known++
		}
	}
	seen := map[string]bool{}
	for _, n := range qs {
		_, recent := t.recent[n]
		if t.live[n] || recent || seen[n] {
			continue
		}
		seen[n] = true
		fresh = append(fresh, n)
	}
	return fresh, known + len(fresh), nil
}

// Note records names this replica just admitted for tenant.
func (q *Queues) Note(tenant string, names []string) {
	if len(names) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.m[tenant]
	if t == nil {
		return // evicted meanwhile: the next load reads the projection
	}
	now := q.now()
	for _, n := range names {
		t.recent[n] = now
	}
}

// tenant returns tenant's entry, reloading its live set when older than TTL.
func (q *Queues) tenant(ctx context.Context, tenant string) (*tenantQueues, error) {
	now := q.now()
	q.mu.Lock()
	t := q.m[tenant]
	fresh := t != nil && now.Sub(t.loaded) < q.ttl
	q.mu.Unlock()
	if fresh {
		return t, nil
	}
	live, err := q.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if t = q.m[tenant]; t == nil {
		if len(q.m) > 100_000 {
			q.m = map[string]*tenantQueues{}
		}
		t = &tenantQueues{recent: map[string]time.Time{}}
		q.m[tenant] = t
	}
	t.live, t.loaded = live, now
	for n := range t.recent {
		if _, projected := live[n]; projected {
			delete(t.recent, n) // the projection counts it from now on
		}
	}
	return t, nil
}
