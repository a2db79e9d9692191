package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ferryhq/ferry/services/api"
)

type openAPIDoc struct {
	Paths map[string]map[string]json.RawMessage `json:"paths"`
}

// TestOpenAPICoversRoutes checks every route the api registers is in the
// document and not marked planned, and that the document is served.
func TestOpenAPICoversRoutes(t *testing.T) {
	b := setup(t, api.Config{})
	var doc openAPIDoc
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	router := b.srv.Config.Handler.(chi.Routes)
	n := 0
	err := chi.Walk(router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(route, "/")
		op, ok := doc.Paths[route][strings.ToLower(method)]
		if !ok {
			t.Errorf("%s %s is not in openapi.json", method, route)
			return nil
		}
		var meta struct {
			Status string `json:"x-ferry-status"`
		}
		_ = json.Unmarshal(op, &meta)
		if meta.Status == "planned" {
			t.Errorf("%s %s is served but marked planned", method, route)
		}
		n++
		return nil
	})
	if err != nil || n < 6 {
		t.Fatalf("walked %d routes: %v", n, err)
	}
	res, err := http.Get(b.srv.URL + "/v1/openapi.json")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /v1/openapi.json: %v %v", res, err)
	}
	res.Body.Close()
}

// TestOpenAPIExamples validates every example against its schema.
func TestOpenAPIExamples(t *testing.T) {
	raw := api.OpenAPI()
	root, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const base = "file:///openapi.json"
	if err := c.AddResource(base, root); err != nil {
		t.Fatal(err)
	}
	// Every component schema compiles.
	var doc struct {
		Paths      map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for name := range doc.Components.Schemas {
		if _, err := c.Compile(base + "#/components/schemas/" + name); err != nil {
			t.Errorf("schema %s: %v", name, err)
		}
	}
	esc := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1") }
	checked := 0
	check := func(ptr string, media map[string]any) {
		for mt, m := range media {
			mm := m.(map[string]any)
			// Named examples (`examples: {name: {value}}`) are checked too.
			exs := map[string]any{}
			if ex, ok := mm["example"]; ok {
				exs["example"] = ex
			}
			if named, ok := mm["examples"].(map[string]any); ok {
				for name, e := range named {
					if v, ok := e.(map[string]any)["value"]; ok {
						exs["examples/"+name] = v
					}
				}
			}
			if len(exs) == 0 {
				continue
			}
			sch, err := c.Compile(base + "#" + ptr + "/" + esc(mt) + "/schema")
			if err != nil {
				t.Errorf("%s: %v", ptr, err)
				continue
			}
			for name, ex := range exs {
				b, _ := json.Marshal(ex)
				inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
				if err := sch.Validate(inst); err != nil {
					t.Errorf("%s at %s/%s does not validate: %v", name, ptr, esc(mt), err)
				}
				checked++
			}
		}
	}
	paths := make([]string, 0, len(doc.Paths))
	for p := range doc.Paths {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		for method, op := range doc.Paths[p] {
			o := op.(map[string]any)
			ptr := "/paths/" + esc(p) + "/" + method
			if rb, ok := o["requestBody"].(map[string]any); ok {
				if content, ok := rb["content"].(map[string]any); ok {
					check(ptr+"/requestBody/content", content)
				}
			}
			for code, r := range o["responses"].(map[string]any) {
				if content, ok := r.(map[string]any)["content"].(map[string]any); ok {
					check(ptr+"/responses/"+code+"/content", content)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d examples checked", checked)
	}
}
