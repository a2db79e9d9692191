package outbound_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/ferryhq/ferry/platform/outbound"
)

// TestBlockedSpellings: every way of writing a refused address is refused,
// above all with an IPv6 zone, which makes netip.Prefix.Contains false.
func TestBlockedSpellings(t *testing.T) {
	cases := map[string]string{
		"fd00:ec2::254%1":           "private",
		"fd00:ec2::254%eth0":        "private",
		"::1%1":                     "loopback",
		"::1%lo":                    "loopback",
		"fe80::1%eth0":              "link-local",
		"::%1":                      "unspecified",
		"::ffff:169.254.169.254":    "link-local",
		"::ffff:a9fe:a9fe":          "link-local",
		"::ffff:169.254.169.254%1":  "link-local",
		"::a9fe:a9fe":               "reserved", // IPv4-compatible
		"::127.0.0.1":               "reserved",
		"64:ff9b::a9fe:a9fe":        "link-local (embedded in IPv6)",
		"64:ff9b::a9fe:a9fe%3":      "link-local (embedded in IPv6)",
		"64:ff9b::7f00:1":           "loopback (embedded in IPv6)",
		"2002:a9fe:a9fe::":          "link-local (embedded in IPv6)",
		"2002:7f00:1::1%lo":         "loopback (embedded in IPv6)",
		"::ffff:0:a9fe:a9fe":        "link-local (embedded in IPv6)", // SIIT IPv4-translated
		"64:ff9b:1::a9fe:a9fe":      "reserved",                      // local-use NAT64
		"2001:0:4136:e378::1":       "reserved",                      // Teredo
		"192.88.99.1":               "reserved",
		"0.0.0.0":                   "unspecified",
		"2001:4860:4860::8888":      "",
		"64:ff9b::5db8:d822":        "", // NAT64 of the public 93.184.216.34
		"2002:5db8:d822::1":         "", // 6to4 of the same
		"2606:4700:4700::1111%eth0": "",
	}
	for addr, want := range cases {
		reason, blocked := outbound.Blocked(netip.MustParseAddr(addr), nil)
		if reason != want || blocked != (want != "") {
			t.Errorf("Blocked(%s) = %q, %v; want %q", addr, reason, blocked, want)
		}
		// CheckAddress sees what net.Dialer.Control receives: "[addr%zone]:port".
		err := outbound.CheckAddress(net.JoinHostPort(addr, "80"), nil)
		if (err != nil) != (want != "") || (err != nil && !errors.Is(err, outbound.ErrBlocked)) {
			t.Errorf("CheckAddress(%s) = %v; want blocked=%v", addr, err, want != "")
		}
	}
	// The allowlist applies to the address without its zone too.
	allow := []netip.Prefix{netip.MustParsePrefix("fd00:ec2::/64")}
	if _, blocked := outbound.Blocked(netip.MustParseAddr("fd00:ec2::254%1"), allow); blocked {
		t.Error("allowlisted zoned fd00:ec2::254%1 refused")
	}
}

// listener serves on [::1] (or the given address) and counts the requests
// that reached it: the assertion that matters is that none did.
func listener(t *testing.T, addr string) (port string, hits *atomic.Int64) {
	t.Helper()
	hits = new(atomic.Int64)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "secret")
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, hits
}

// TestZonedLoopbackNeverDialled is issue 11's attack at dial time: with
// 127.0.0.0/8 allowlisted (as the e2e stack does), a request to
// [::1%1] must be refused before the connection is made.
func TestZonedLoopbackNeverDialled(t *testing.T) {
	port, hits := listener(t, "[::1]:0")
	cl := outbound.NewClient(outbound.Options{Allow: loopback})
	for _, host := range []string{"[::1%251]", "[::1%25lo]", "[::1]", "[::ffff:169.254.169.254]", "[::ffff:127.0.0.1%251]", "[0:0:0:0:0:0:0:1%251]"} {
		_, err := cl.Get("http://" + host + ":" + port + "/latest/meta-data/")
		if !errors.Is(err, outbound.ErrBlocked) {
			t.Errorf("%s: err = %v, want ErrBlocked", host, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the [::1] listener saw %d requests", n)
	}
}

// TestURLSpellingsNeverDialled: numeric, short, trailing-dot and userinfo
// spellings of loopback and the unspecified address all fail, and no
// request reaches a listener bound to every local address. Some spellings
// fail to resolve rather than being refused by the guard (Go's resolver
// does not read inet_aton forms); what matters is that nothing is dialled.
func TestURLSpellingsNeverDialled(t *testing.T) {
	port, hits := listener(t, ":0") // [::] and 0.0.0.0
	hosts := []string{
		"127.0.0.1", "127.1", "127.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "0x7f.0.0.1", "017700000001",
		"0.0.0.0", "0", "[::]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]",
		"[2002:7f00:1::]", "localhost", "localhost.", "LOCALHOST", "evil.example@127.0.0.1", "user:pw@[::1]",
		"127.0.0.1.", "[::1%25eth0]",
	}
	cl := outbound.NewClient(outbound.Options{MaxRedirects: -1})
	for _, h := range hosts {
		resp, err := cl.Get("http://" + h + ":" + port + "/")
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: answered %s", h, resp.Status)
			continue
		}
		t.Logf("%s: %v", h, err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the listener saw %d requests", n)
	}
}

// TestRedirectToZonedRefused: the guard runs on each hop, so a redirect
// from an allowlisted host to a zoned loopback address is refused.
func TestRedirectToZonedRefused(t *testing.T) {
	port, hits := listener(t, "[::1]:0")
	for _, loc := range []string{"http://[::1%251]:" + port + "/", "http://[::ffff:169.254.169.254]/", "http://[fd00:ec2::254%251]/latest/meta-data/"} {
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, loc, http.StatusFound)
		}))
		cl := outbound.NewClient(outbound.Options{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		_, err := cl.Get(front.URL)
		front.Close()
		if !errors.Is(err, outbound.ErrBlocked) {
			t.Errorf("redirect to %s: err = %v, want ErrBlocked", loc, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the [::1] listener saw %d requests", n)
	}
}
