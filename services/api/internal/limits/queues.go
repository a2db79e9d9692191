package limits

import (
	"context"
	"sync"
	"time"

	"github.com/ferryhq/ferry/platform/ttlcache"
)

// Queues bounds the distinct queues a tenant has live (with unfinished
// jobs). The live set comes from a loader (the projection's per-queue
// counts), cached for a short TTL; names this replica admitted recently are
// added for Hold, because the projection sees a job a little after it is
// accepted and a flood of new names must not slip through that gap. Other
// replicas' recent admissions are seen once projected, so the bound may be
// exceeded by about what all replicas admit within the projection's lag.
type Queues struct {
	live *ttlcache.Cache[liveQueues]
	hold time.Duration
	now  func() time.Time

	mu     sync.Mutex
	recent map[string]map[string]time.Time // tenant → name admitted by this replica, not yet seen projected → when
}

// liveQueues is a tenant's queues as the projection knew them at loaded:
// queue → has unfinished jobs.
type liveQueues struct {
	queues map[string]bool
	loaded time.Time
}

// NewQueues returns a Queues over load, which returns the tenant's queues
// the projection knows, each with whether it has unfinished jobs; ttl
// defaults to 1s, hold to 1m.
func NewQueues(ttl, hold time.Duration, load func(ctx context.Context, tenant string) (map[string]bool, error)) *Queues {
	if hold <= 0 {
		hold = time.Minute
	}
	q := &Queues{hold: hold, now: time.Now, recent: map[string]map[string]time.Time{}}
	q.live = ttlcache.New(ttl, func(ctx context.Context, tenant string) (liveQueues, error) {
		at := q.now()
		m, err := load(ctx, tenant)
		return liveQueues{queues: m, loaded: at}, err
	})
	return q
}

// setClock replaces the clock of Queues and of its cache (tests).
func (q *Queues) setClock(now func() time.Time) {
	q.now = now
	q.live.SetClock(now)
}

// Check returns the names of qs the tenant does not have live yet and how
// many queues it would have live once they are added. The caller refuses
// the request when that exceeds its limit, and otherwise calls Note with
// the new names once the jobs are accepted.
func (q *Queues) Check(ctx context.Context, tenant string, qs []string) (fresh []string, total int, err error) {
	l, err := q.live.Get(ctx, tenant)
	if err != nil {
		return nil, 0, err
	}
	live := l.queues
	q.mu.Lock()
	defer q.mu.Unlock()
	recent := q.recentOf(tenant, l)
	known := len(recent)
	for _, l := range live {
		if l {
			known++
		}
	}
	seen := map[string]bool{}
	for _, n := range qs {
		_, r := recent[n]
		if live[n] || r || seen[n] {
			continue
		}
		seen[n] = true
		fresh = append(fresh, n)
	}
	return fresh, known + len(fresh), nil
}

// recentOf returns tenant's recent names, dropping those past the hold and
// those a projection read after their admission knows (it counts them from
// then on). q.mu is held.
func (q *Queues) recentOf(tenant string, live liveQueues) map[string]time.Time {
	recent := q.recent[tenant]
	now := q.now()
	for n, at := range recent {
		_, projected := live.queues[n]
		if (projected && !live.loaded.Before(at)) || now.Sub(at) > q.hold {
			delete(recent, n)
		}
	}
	if len(recent) == 0 {
		delete(q.recent, tenant)
	}
	return recent
}

// Note records names this replica just admitted for tenant.
func (q *Queues) Note(tenant string, names []string) {
	if len(names) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.recent[tenant]
	if r == nil {
		if len(q.recent) >= maxTenants {
			q.recent = map[string]map[string]time.Time{}
		}
		r = map[string]time.Time{}
		q.recent[tenant] = r
	}
	now := q.now()
	for _, n := range names {
		r[n] = now
	}
}

// maxTenants bounds the tenants whose recent names are kept.
const maxTenants = 100_000
