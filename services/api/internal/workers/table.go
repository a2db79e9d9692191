// Package workers keeps, in memory, what the live workers announce on the
// workers topic (schema.WorkerStatus): which job types each pool can run
// now, so the api can say why a queued job waits, and which types any worker
// announced lately, so it can refuse unknown types at submission.
//
// The rule of "can run now" is the scheduler's (its dispatch step parks a
// job otherwise): a live worker of the job's pool that handles the type owns
// a dispatch partition — a partition claimed by two workers belongs to the
// later announcement — or a live worker announces no routing at all (a
// worker from before routing, which takes every type).
package workers

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// Table is the announcements of the workers. It is safe for concurrent use.
type Table struct {
	ttl, window time.Duration

	mu      sync.Mutex
	workers map[string]schema.WorkerStatus // by worker id: the latest announcement
	seen    map[poolType]time.Time         // latest announcement of a type by any worker
	caught  bool
}

type poolType struct{ pool, typ string }

// New returns a table where a worker is live for ttl after its latest
// announcement and a type is known for window after a worker announced it.
func New(ttl, window time.Duration) *Table {
	return &Table{ttl: ttl, window: window, workers: map[string]schema.WorkerStatus{}, seen: map[poolType]time.Time{}}
}

// Observe records one announcement (in any order: an older one than the
// worker's latest changes nothing).
func (t *Table) Observe(ws schema.WorkerStatus) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.workers[ws.WorkerID]; ok && old.At.After(ws.At) {
		return
	}
	ws.HandedBack, ws.Rejected = nil, nil
	t.workers[ws.WorkerID] = ws
	if ws.Routing != nil {
		for _, typ := range ws.Routing.Types {
			k := poolType{ws.Pool, typ}
			if ws.At.After(t.seen[k]) {
				t.seen[k] = ws.At
			}
		}
	}
}

// CaughtUp marks the table as holding every announcement of the window:
// before that, Known does not refuse anything.
func (t *Table) CaughtUp() {
	t.mu.Lock()
	t.caught = true
	t.mu.Unlock()
}

// Forget drops workers and types older than the window at now.
func (t *Table) Forget(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, ws := range t.workers {
		if now.Sub(ws.At) > t.window {
			delete(t.workers, id)
		}
	}
	for k, at := range t.seen {
		if now.Sub(at) > t.window {
			delete(t.seen, k)
		}
	}
}

// Known reports whether a worker of pool announced type typ within the
// window before now; always true until the table has caught up.
func (t *Table) Known(pool, typ string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.caught {
		return true
	}
	at, ok := t.seen[poolType{pool, typ}]
	if ok && now.Sub(at) <= t.window {
		return true
	}
	// A worker from before routing announces no types: it takes any.
	for _, ws := range t.workers {
		if ws.Pool == pool && ws.Routing == nil && now.Sub(ws.At) <= t.window {
			return true
		}
	}
	return false
}

// Waiting says why a ready job of type typ in pool cannot be dispatched
// now, or "" when a live worker takes it (or the table has not caught up).
func (t *Table) Waiting(pool, typ string, now time.Time) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.caught {
		return ""
	}
	var live []schema.WorkerStatus
	for _, ws := range t.workers {
		if ws.Pool == pool && !ws.Stopping && now.Sub(ws.At) <= t.ttl {
			if ws.Routing == nil {
				return ""
			}
			live = append(live, ws)
		}
	}
	if len(live) == 0 {
		return fmt.Sprintf("no live worker in pool %s", pool)
	}
	owner := map[int32]schema.WorkerStatus{}
	handles := false
	for _, ws := range live {
		handles = handles || slices.Contains(ws.Routing.Types, typ)
		for _, p := range ws.Routing.Partitions {
			if o, ok := owner[p]; !ok || ws.At.After(o.At) {
				owner[p] = ws
			}
		}
	}
	for _, ws := range owner {
		if slices.Contains(ws.Routing.Types, typ) {
			return ""
		}
	}
	if handles {
		return fmt.Sprintf("the workers that handle type %s own no dispatch partition of pool %s (more workers than partitions?)", typ, pool)
	}
	return fmt.Sprintf("no worker handles type %s", typ)
}
