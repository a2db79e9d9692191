package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser is a headless Chromium tab driven over the DevTools protocol.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	// shots is where screenshots go: $FERRY_TEST_ARTIFACTS, else a
	// temporary directory of the test.
	shots string
}

// browserStep bounds one step (a navigation, a wait); generous, so a loaded
// machine passes: nothing asserts speed.
const browserStep = 60 * time.Second

// startBrowser starts Debian's chromium headless (installed by
// scripts/install-deps.sh) with a fresh profile.
func startBrowser(t *testing.T, base string) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the console's browser tests need chromium: run scripts/install-deps.sh (as root) or install Debian's chromium package: %v", err)
	}
	opts := append([]chromedp.ExecAllocatorOption{}, chromedp.DefaultExecAllocatorOptions[:]...)
	opts = append(opts, chromedp.ExecPath(path), chromedp.Headless, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true), chromedp.UserDataDir(t.TempDir()))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to sandbox as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	shots := os.Getenv("FERRY_TEST_ARTIFACTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	// The first action starts the browser and ties it to the context it
	// runs on: the tab's own, not a step's timeout.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx, base: base, shots: shots}
}

// do runs steps, failing the test with what on error.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// open navigates to a console page (a fragment such as "#/jobs").
func (b *browser) open(fragment, waitFor string) {
	b.t.Helper()
	b.do("open "+fragment, chromedp.Navigate(b.base+"/console/"+fragment))
	b.until("page "+fragment, fmt.Sprintf(`document.querySelector(%s) !== null`, jsString(waitFor)))
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("browser: eval %s: %v", expr, err)
	}
	return v
}

// until waits for a JavaScript predicate to hold in the page.
func (b *browser) until(what, predicate string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(browserStep))); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById("main").innerText.slice(0, 2000)`))
		b.t.Fatalf("browser: waiting for %s (%s): %v\npage:\n%s", what, predicate, err, text)
	}
}

// text is the visible text of the first element matching sel.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		b.t.Fatalf("browser: text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// shot writes a full-page PNG screenshot named name and logs where.
func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("browser: screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// signIn signs in on the console's form with key and waits for the header.
func (b *browser) signIn(key, who string) {
	b.t.Helper()
	b.open("#/overview", "#signin")
	b.do("sign in", chromedp.SendKeys("#key", key), chromedp.Click(`#signin button[type="submit"]`))
	b.until("signed in as "+who, fmt.Sprintf(`document.getElementById("who").innerText.includes(%q)`, who))
}

// signOut signs out from the header and waits for the sign-in form.
func (b *browser) signOut() {
	b.t.Helper()
	b.do("sign out", chromedp.Click("#signout"), chromedp.WaitVisible("#signin"))
}
