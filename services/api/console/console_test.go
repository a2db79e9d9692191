package console

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

func serve(t *testing.T, target string) *httptest.ResponseRecorder {
	t.Helper()
	r := chi.NewRouter()
	New(Config{}, nil, "", func(h http.Handler) http.Handler { return h }).Routes(r)
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
	return w
}

// TestAssets: the page and its files are served with the security headers;
// directories are not listed and nothing outside the assets is reachable.
func TestAssets(t *testing.T) {
	page := serve(t, "/console/")
	if page.Code != http.StatusOK || !strings.HasPrefix(page.Header().Get("Content-Type"), "text/html") ||
		page.Header().Get("Content-Security-Policy") != contentSecurityPolicy || page.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("page: %d %v", page.Code, page.Header())
	}
	js := serve(t, "/console/assets/js/app.js")
	if js.Code != http.StatusOK || !strings.Contains(js.Header().Get("Content-Type"), "javascript") {
		t.Fatalf("app.js: %d %v", js.Code, js.Header())
	}
	for _, p := range []string{"/console/assets/js/", "/console/assets/js", "/console/assets/index.html", "/console/assets/nope.js", "/console/assets/../console.go"} {
		if w := serve(t, p); w.Code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, w.Code)
		}
	}
}

// importRE finds the static and dynamic relative imports of a module.
var importRE = regexp.MustCompile(`(?:from\s+|import\()\s*"(\.{1,2}/[^"]+)"`)

// TestModuleGraph: every relative import of every script names an
// embedded file, and no page uses inline script or style (the CSP would
// block them).
func TestModuleGraph(t *testing.T) {
	n := 0
	err := fs.WalkDir(assets, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(assets, p)
		if err != nil {
			return err
		}
		src := string(b)
		if strings.HasSuffix(p, ".html") && (strings.Contains(src, "style=") || regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`).MatchString(src)) {
			t.Errorf("%s has inline script or style", p)
		}
		if !strings.HasSuffix(p, ".js") {
			return nil
		}
		for _, m := range importRE.FindAllStringSubmatch(src, -1) {
			n++
			target := path.Join(path.Dir(p), m[1])
			if _, err := fs.Stat(assets, target); err != nil {
				t.Errorf("%s imports %s: %v", p, m[1], err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("found only %d imports", n)
	}
}
