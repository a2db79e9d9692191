// Package recent is a small bounded LRU map the worker uses to remember the
// jobs it ran lately, for its effectively-once checks.
package recent

import "container/list"

// Map is a bounded map that evicts the least recently added or updated key.
// It is not safe for concurrent use.
type Map[K comparable, V any] struct {
	max   int
	ll    *list.List
	items map[K]*list.Element
}

type entry[K comparable, V any] struct {
	key K
	val V
}

// New returns a Map holding at most max entries (at least 1).
func New[K comparable, V any](max int) *Map[K, V] {
	if max < 1 {
		max = 1
	}
	return &Map[K, V]{max: max, ll: list.New(), items: make(map[K]*list.Element)}
}

// Get returns the value of k.
func (m *Map[K, V]) Get(k K) (V, bool) {
	if e, ok := m.items[k]; ok {
		return e.Value.(*entry[K, V]).val, true
	}
	var zero V
	return zero, false
}

// Put sets k to v, making it the most recent entry.
func (m *Map[K, V]) Put(k K, v V) {
	if e, ok := m.items[k]; ok {
		e.Value.(*entry[K, V]).val = v
		m.ll.MoveToFront(e)
		return
	}
	m.items[k] = m.ll.PushFront(&entry[K, V]{k, v})
	for m.ll.Len() > m.max {
		last := m.ll.Back()
		m.ll.Remove(last)
		delete(m.items, last.Value.(*entry[K, V]).key)
	}
}

// Len is the number of entries.
func (m *Map[K, V]) Len() int { return m.ll.Len() }
