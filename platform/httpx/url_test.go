package httpx

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestUnstorableURLRefused: a NUL or invalid UTF-8 in a path or a query
// parameter answers 400 invalid_parameter before any handler runs; clean
// requests, including non-ASCII UTF-8, reach the handler.
func TestUnstorableURLRefused(t *testing.T) {
	r := NewRouter(nil, nil)
	reached := 0
	r.Get("/v1/jobs", func(w http.ResponseWriter, _ *http.Request) { reached++ })
	r.Get("/v1/jobs/{id}", func(w http.ResponseWriter, _ *http.Request) { reached++ })
	for _, target := range []string{"/v1/jobs?tag=a%00b", "/v1/jobs?type=%ff", "/v1/jobs?a%00=1", "/v1/jobs/job%00x", "/v1/jobs/%c3%28"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
		var body struct{ Error Error }
		_ = json.Unmarshal(w.Body.Bytes(), &body)
		if w.Code != http.StatusBadRequest || body.Error.Code != "invalid_parameter" {
			t.Errorf("GET %s: %d %s, want 400 invalid_parameter", target, w.Code, w.Body)
		}
	}
	if reached != 0 {
		t.Fatalf("%d unstorable requests reached a handler", reached)
	}
	for _, target := range []string{"/v1/jobs?tag=%c3%a9t%c3%a9", "/v1/jobs/job_1"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
		if w.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s, want 200", target, w.Code, w.Body)
		}
	}
	if reached != 2 {
		t.Fatalf("clean requests reached the handler %d times, want 2", reached)
	}
}
