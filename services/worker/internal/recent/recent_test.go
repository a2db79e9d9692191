package recent

import "testing"

func TestMap(t *testing.T) {
	m := New[string, int](2)
	m.Put("a", 1)
	m.Put("b", 2)
	m.Put("a", 3) // a is now the most recent
	m.Put("c", 4) // evicts b
	if _, ok := m.Get("b"); ok {
		t.Fatal("b not evicted")
	}
	if v, ok := m.Get("a"); !ok || v != 3 {
		t.Fatalf("a = %v, %v", v, ok)
	}
	if m.Len() != 2 {
		t.Fatalf("Len = %d", m.Len())
	}
}
