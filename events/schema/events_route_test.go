package schema

import "testing"

// A worker that announces no routing (one from before routing) handles
// every type; one that does handles exactly the types it lists.
func TestWorkerRoutingHandles(t *testing.T) {
	var legacy *WorkerRouting
	if !legacy.Handles("report.build") {
		t.Error("a worker without routing must handle every type")
	}
	r := &WorkerRouting{Types: []string{"email.send", "noop"}}
	for typ, want := range map[string]bool{"noop": true, "email.send": true, "report.build": false, "": false} {
		if got := r.Handles(typ); got != want {
			t.Errorf("Handles(%q) = %v, want %v", typ, got, want)
		}
	}
}
