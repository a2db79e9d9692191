package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/services/api"
)

// TestOpenAPICoversStack checks that every route the whole stack serves —
// every service's, as `ferry dev` mounts them — is documented in the OpenAPI
// document and not marked planned, so each issue keeps the document whole.
func TestOpenAPICoversStack(t *testing.T) {
	e := startStack(t, nil)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := chi.Walk(e.stack.Handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(route, "/")
		n++
		op, ok := doc.Paths[route][strings.ToLower(method)]
		if !ok {
			t.Errorf("%s %s is served but missing from services/api/openapi.json", method, route)
			return nil
		}
		var meta struct {
			Status string `json:"x-ferry-status"`
		}
		_ = json.Unmarshal(op, &meta)
		if meta.Status == "planned" {
			t.Errorf("%s %s is served but marked x-ferry-status: planned", method, route)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("walked only %d routes", n)
	}
}
