// Package console serves the Ferry Console, the web UI of operators and
// tenants, at /console.
//
// The console is static HTML, CSS and vanilla JavaScript modules embedded
// in the binary: no framework, no build step. Services own their tables and
// talk only through Kafka, so no one service could render every page from
// its own database; the pages call the same /v1 JSON APIs as any client,
// on the same origin, and every tenant rule applies to them unchanged.
//
// What the console adds on the server is the session: POST /console/session
// exchanges an API key (or the admin key) for a session cookie that
// platform/auth's Middleware accepts in place of `Authorization: Bearer`,
// so the key never stays in the browser (not in URLs, not in storage).
package console

import (
	"embed"
	"errors"
	"io/fs"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/httpx"
)

//go:embed static
var static embed.FS

// assets are the files under /console/assets/.
var assets = func() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	return sub
}()

// Config are the console's settings.
type Config struct {
	// SessionTTL is how long a sign-in lasts (FERRY_CONSOLE_SESSION_TTL;
	// its default is declared in platform/config.Vars).
	SessionTTL time.Duration
}

// LoadConfig reads the console's settings.
func LoadConfig(l *config.Loader) Config {
	return Config{SessionTTL: l.Duration("FERRY_CONSOLE_SESSION_TTL")}
}

// WithDefaults fills unset settings.
func (c Config) WithDefaults() Config {
	config.DefaultVar(&c.SessionTTL, "FERRY_CONSOLE_SESSION_TTL")
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	if c.SessionTTL < time.Minute {
		return errors.New("FERRY_CONSOLE_SESSION_TTL must be at least 1m")
	}
	return nil
}

// Console serves the console's pages and sessions.
type Console struct {
	cfg          Config
	keys         *auth.KeyStore
	adminKey     string
	authenticate func(http.Handler) http.Handler
}

// New returns the console over the key store of the service that mounts
// it; authenticate is that service's authentication middleware.
func New(cfg Config, keys *auth.KeyStore, adminKey string, authenticate func(http.Handler) http.Handler) *Console {
	return &Console{cfg: cfg.WithDefaults(), keys: keys, adminKey: adminKey, authenticate: authenticate}
}

// contentSecurityPolicy allows the console's own scripts, styles, images
// and API calls only: no inline script or style, no framing, no plugins.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// secure sets the security headers of every console response.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// Routes mounts the console on r with full paths (`ferry dev` mounts every
// service on one router).
func (c *Console) Routes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(secure)
		r.Get("/console", c.handleIndex)
		r.Get("/console/", c.handleIndex)
		r.Get("/console/assets/*", c.handleAsset)
		r.Post("/console/session", c.handleSignIn)
		r.Get("/console/session", c.handleSession)
		r.With(c.authenticate).Delete("/console/session", c.handleSignOut)
	})
}

// handleIndex serves the single page; the page routes by URL fragment
// (#/jobs, #/jobs/<id>, …), so no path below /console/ needs a route.
func (c *Console) handleIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, assets, "index.html")
}

// handleAsset serves a script, style sheet or icon. Assets change only
// with the binary; no-cache makes the browser revalidate after an upgrade.
func (c *Console) handleAsset(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	name := chi.URLParam(r, "*")
	// Files only: no directory listings, and the page only at /console.
	if st, err := fs.Stat(assets, name); err != nil || st.IsDir() || name == "index.html" {
		httpx.WriteError(w, r, httpx.ErrNotFound)
		return
	}
	http.ServeFileFS(w, r, assets, name)
}
