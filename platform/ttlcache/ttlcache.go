// Package ttlcache is the one short-lived read cache of the request paths
// (tenant settings, a tenant's job counts and live queues): a value read
// from a store is served for a TTL, and never older.
//
// It refreshes ahead: once a value is past half its TTL, the next Get
// still answers it at once and starts a single background load, so under
// steady traffic no request waits for the store at all. Only a key that is
// missing or past its whole TTL (no traffic for a while, or a store slower
// than half the TTL) is loaded on the caller's path, and then concurrent
// callers of the same key share one load instead of each sending the same
// query (singleflight).
package ttlcache

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// maxKeys bounds the cache: past it, the cache is emptied (the loads it
// then repeats are the price of a flood of distinct keys, not a leak).
const maxKeys = 100_000

// loadTimeout bounds one load: a load runs on no caller's context, so that
// one caller going away cannot fail the others sharing it.
const loadTimeout = 10 * time.Second

// Cache maps string keys to values a loader reads. The zero value is not
// usable; see New.
type Cache[V any] struct {
	load func(ctx context.Context, key string) (V, error)
	ttl  time.Duration
	now  func() time.Time

	flight singleflight.Group
	mu     sync.Mutex
	m      map[string]entry[V]
}

type entry[V any] struct {
	v      V
	loaded time.Time
}

// New returns a cache over load whose values live for ttl (1s when not
// positive).
func New[V any](ttl time.Duration, load func(ctx context.Context, key string) (V, error)) *Cache[V] {
	if ttl <= 0 {
		ttl = time.Second
	}
	return &Cache[V]{load: load, ttl: ttl, now: time.Now, m: map[string]entry[V]{}}
}

// SetClock replaces the cache's clock (tests).
func (c *Cache[V]) SetClock(now func() time.Time) { c.now = now }

// Get returns key's value as loaded at most TTL ago, loading it when the
// cache has none that fresh.
func (c *Cache[V]) Get(ctx context.Context, key string) (V, error) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	age := now.Sub(e.loaded)
	if ok && age < c.ttl {
		if age >= c.ttl/2 {
			c.flight.DoChan(key, c.loader(key)) // refresh ahead; its result lands in the map
		}
		return e.v, nil
	}
	select {
	case r := <-c.flight.DoChan(key, c.loader(key)):
		if r.Err != nil {
			var zero V
			return zero, r.Err
		}
		return r.Val.(V), nil
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// loader is the shared load of key: it stores what it read, stamped with
// when the load started (the value is at least that fresh).
func (c *Cache[V]) loader(key string) func() (any, error) {
	return func() (any, error) {
		started := c.now()
		ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
		defer cancel()
		v, err := c.load(ctx, key)
		if err != nil {
			return v, err
		}
		c.mu.Lock()
		if len(c.m) >= maxKeys {
			c.m = map[string]entry[V]{}
		}
		c.m[key] = entry[V]{v: v, loaded: started}
		c.mu.Unlock()
		return v, nil
	}
}

// Update adjusts key's cached value, if there is one, until the next load
// replaces it (what this process just changed, before the store shows it).
func (c *Cache[V]) Update(key string, f func(V) V) {
	c.mu.Lock()
	if e, ok := c.m[key]; ok {
		e.v = f(e.v)
		c.m[key] = e
	}
	c.mu.Unlock()
}
