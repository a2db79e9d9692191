package ssebridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/platform/httpx"
)

// errKeyRevoked is the cause of a stream's context when its API key was
// revoked (or its tenant disabled) while it was open.
var errKeyRevoked = errors.New("sse-bridge: api key revoked")

// streamSlots counts the open streams of each tenant in this process, so
// that one tenant cannot hold every connection, goroutine and hub
// subscription of the process.
type streamSlots struct {
	max int

	mu   sync.Mutex
	open map[string]int
}

func newStreamSlots(max int) *streamSlots {
	return &streamSlots{max: max, open: map[string]int{}}
}

// acquire takes a slot of tenant, or answers 429 too_many_streams.
func (s *streamSlots) acquire(tenant string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[tenant] >= s.max {
		e := httpx.Errorf(http.StatusTooManyRequests, "too_many_streams",
			"this tenant already has %d open event streams (FERRY_SSE_MAX_STREAMS); close one first", s.max)
		return nil, e
	}
	s.open[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.open[tenant]--; s.open[tenant] <= 0 {
				delete(s.open, tenant)
			}
		})
	}, nil
}

// keyWatch ends the streams of API keys revoked while they are open. The
// api revokes keys in Postgres, possibly in another process, so the watch
// asks Postgres: one query per interval for every key with an open stream
// in this process, whatever the number of streams.
type keyWatch struct {
	pool *pgxpool.Pool

	mu      sync.Mutex
	streams map[string]map[*context.CancelCauseFunc]struct{} // by key id
}

func newKeyWatch(pool *pgxpool.Pool) *keyWatch {
	return &keyWatch{pool: pool, streams: map[string]map[*context.CancelCauseFunc]struct{}{}}
}

// watch registers a stream of keyID; cancel ends it with errKeyRevoked.
// The returned func unregisters it.
func (w *keyWatch) watch(keyID string, cancel context.CancelCauseFunc) (unwatch func()) {
	p := &cancel
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.streams[keyID] == nil {
		w.streams[keyID] = map[*context.CancelCauseFunc]struct{}{}
	}
	w.streams[keyID][p] = struct{}{}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.streams[keyID], p)
		if len(w.streams[keyID]) == 0 {
			delete(w.streams, keyID)
		}
	}
}

// check ends the streams of every watched key that is revoked, deleted or
// whose tenant is disabled.
func (w *keyWatch) check(ctx context.Context) error {
	w.mu.Lock()
	ids := make([]string, 0, len(w.streams))
	for id := range w.streams {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	rows, err := w.pool.Query(ctx, `
		SELECT k.id FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
		WHERE k.id = ANY($1) AND k.revoked_at IS NULL AND t.disabled_at IS NULL`, ids)
	if err != nil {
		return fmt.Errorf("sse-bridge: check keys: %w", err)
	}
	live := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("sse-bridge: check keys: %w", err)
		}
		live[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sse-bridge: check keys: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if live[id] {
			continue
		}
		for cancel := range w.streams[id] {
			(*cancel)(errKeyRevoked)
		}
	}
	return nil
}
