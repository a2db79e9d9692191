package outbound_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ferryhq/ferry/platform/outbound"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

func TestLoopbackRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi") }))
	defer srv.Close()

	_, err := outbound.NewClient(outbound.Options{}).Get(srv.URL)
	if !errors.Is(err, outbound.ErrBlocked) {
		t.Fatalf("err = %v, want ErrBlocked", err)
	}
	var be *outbound.BlockedError
	if !errors.As(err, &be) || be.Reason != "loopback" || !be.Addr.IsLoopback() {
		t.Fatalf("BlockedError = %+v", be)
	}
	// A host name resolving to loopback is refused the same way.
	_, err = outbound.NewClient(outbound.Options{}).Get(strings.Replace(srv.URL, "127.0.0.1", "localhost", 1))
	if !errors.Is(err, outbound.ErrBlocked) {
		t.Fatalf("localhost: err = %v, want ErrBlocked", err)
	}
}

func TestAllowlisted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer srv.Close()

	resp, err := outbound.NewClient(outbound.Options{Allow: loopback}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, truncated, err := outbound.ReadBody(resp.Body, 3)
	if err != nil || !truncated || string(body) != "hel" {
		t.Fatalf("ReadBody = %q, %v, %v", body, truncated, err)
	}
}

func TestRedirectToPrivateRefused(t *testing.T) {
	// The first hop (127.0.0.1) is allowlisted as a single address; it
	// redirects to 127.0.0.2, which is not, so the redirect is refused.
	target := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secret") }))
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("cannot listen on 127.0.0.2 (Linux routes all of 127.0.0.0/8 to loopback): %v", err)
	}
	target.Listener = ln
	target.Start()
	defer target.Close()

	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/latest/meta-data", http.StatusFound)
	}))
	defer front.Close()

	cl := outbound.NewClient(outbound.Options{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	_, err = cl.Get(front.URL)
	var be *outbound.BlockedError
	if !errors.As(err, &be) || be.Addr != netip.MustParseAddr("127.0.0.2") {
		t.Fatalf("err = %v, want BlockedError for 127.0.0.2", err)
	}
}

func TestTooManyRedirects(t *testing.T) {
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, srv.URL, http.StatusFound)
	}))
	defer srv.Close()
	_, err := outbound.NewClient(outbound.Options{Allow: loopback, MaxRedirects: 2}).Get(srv.URL)
	if !errors.Is(err, outbound.ErrTooManyRedirects) {
		t.Fatalf("err = %v", err)
	}
}

func TestBlocked(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1":          "loopback",
		"10.1.2.3":           "private",
		"172.31.255.255":     "private",
		"192.168.0.1":        "private",
		"100.100.100.200":    "CGNAT",
		"169.254.169.254":    "link-local",
		"0.0.0.0":            "unspecified",
		"224.0.0.1":          "multicast",
		"255.255.255.255":    "reserved",
		"::1":                "loopback",
		"::":                 "unspecified",
		"fd00:ec2::254":      "private",
		"fe80::1":            "link-local",
		"ff02::1":            "multicast",
		"::ffff:127.0.0.1":   "loopback",
		"64:ff9b::a00:1":     "private (embedded in IPv6)",
		"2002:a9fe:a9fe::1":  "link-local (embedded in IPv6)",
		"93.184.216.34":      "",
		"2606:4700:4700::64": "",
		"172.32.0.1":         "",
	}
	for addr, want := range cases {
		reason, blocked := outbound.Blocked(netip.MustParseAddr(addr), nil)
		if reason != want || blocked != (want != "") {
			t.Errorf("Blocked(%s) = %q, %v; want %q", addr, reason, blocked, want)
		}
	}
	if _, blocked := outbound.Blocked(netip.MustParseAddr("10.0.0.5"), []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}); blocked {
		t.Error("allowlisted 10.0.0.5 refused")
	}
	if _, blocked := outbound.Blocked(netip.MustParseAddr("::ffff:10.0.0.5"), []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}); blocked {
		t.Error("allowlisted mapped 10.0.0.5 refused")
	}
}
