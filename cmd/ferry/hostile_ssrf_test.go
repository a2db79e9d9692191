package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// ssrfLiterals are address-literal spellings of refused destinations. The
// e2e stack allowlists 127.0.0.0/8, so none of them is an IPv4 loopback:
// the IPv6 loopback, the cloud metadata addresses and their disguises.
var ssrfLiterals = []string{
	"http://[fd00:ec2::254%251]/latest/meta-data/", // issue 11: AWS IMDS over IPv6 with a zone
	"http://[fd00:ec2::254]/latest/meta-data/",
	"http://[fd00:ec2::254%25eth0]/latest/meta-data/",
	"http://[fe80::a9fe:a9fe%25eth0]/",
	"http://[::1%251]:8080/",
	"http://[::1%25lo]/",
	"http://[0:0:0:0:0:0:0:1%251]/",
	"http://[::ffff:169.254.169.254]/latest/meta-data/", // IPv4-mapped
	"http://[::ffff:a9fe:a9fe]/",
	"http://[::ffff:169.254.169.254%251]/",
	"http://[::a9fe:a9fe]/",          // IPv4-compatible
	"http://[64:ff9b::a9fe:a9fe]/",   // NAT64
	"http://[2002:a9fe:a9fe::]/",     // 6to4
	"http://[::ffff:0:a9fe:a9fe]/",   // SIIT IPv4-translated
	"http://[2001:0:4136:e378::1]/",  // Teredo
	"http://[64:ff9b:1::a9fe:a9fe]/", // local-use NAT64
	"http://169.254.169.254/latest/meta-data/",
	"https://169.254.169.254:443/",
	"http://evil.example@169.254.169.254/",
	"http://evil.example:pw@[fd00:ec2::254%251]/",
	"http://100.100.100.200/",
	"http://0.0.0.0/",
	"http://[::]/",
	"http://[::%251]/",
	"http://10.0.0.1/",
}

// ssrfNames are host spellings that only a resolver turns into an address
// (inet_aton forms, trailing dots): depending on the resolver they do not
// resolve (invalid_url) or resolve to a refused address (url_not_allowed).
// Either way the registration is refused with a 422 (a 503 dns_unavailable
// where no DNS server answers at all).
var ssrfNames = []string{
	"http://2852039166/",          // decimal 169.254.169.254
	"http://0251.0376.0251.0376/", // octal
	"http://0xa9fe.a9fe/",
	"http://0xa9.0xfe.0xa9.0xfe/",
	"http://0xa9fea9fe/",
	"http://169.254.43518/", // short form
	"http://169.16689662/",
	"http://169.254.169.254./",
	"http://metadata.google.internal./",
}

// TestHostileSSRFWebhookSpellings: POST /v1/webhooks refuses every spelling
// of a refused address with a stable code, including IPv6 zones, which the
// guard once let through.
func TestHostileSSRFWebhookSpellings(t *testing.T) {
	e := startStack(t, nil)
	for _, u := range ssrfLiterals {
		code, out := e.call("POST", "/v1/webhooks", map[string]any{"url": u, "event_types": []string{"completed"}})
		wantError(t, "webhook "+u, code, out, http.StatusUnprocessableEntity, "url_not_allowed")
	}
	for _, u := range ssrfNames {
		code, out := e.call("POST", "/v1/webhooks", map[string]any{"url": u, "event_types": []string{"completed"}})
		c := errorCode(out)
		refused := (code == http.StatusUnprocessableEntity && (c == "invalid_url" || c == "url_not_allowed")) ||
			(code == http.StatusServiceUnavailable && c == "dns_unavailable") // no DNS server reachable
		if !refused {
			t.Errorf("webhook %s: %d %v, want 422 invalid_url or url_not_allowed", u, code, out)
		}
	}
	if code, out := e.call("GET", "/v1/webhooks", nil); code != http.StatusOK || len(out["webhooks"].([]any)) != 0 {
		t.Fatalf("webhooks after the attack: %d %v, want none registered", code, out)
	}
	e.othersUnaffected(t)
}

// TestHostileSSRFHTTPJobZones: an http job to the IPv6 loopback, spelled
// with a zone or disguised, or redirected there by an allowlisted host,
// fails with the non-retryable class and never reaches the listener.
func TestHostileSSRFHTTPJobZones(t *testing.T) {
	var hits atomic.Int64
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatalf("listen on [::1] (the test needs IPv6 loopback): %v", err)
	}
	inner := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "secret")
	}))
	inner.Listener = ln
	inner.Start()
	defer inner.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	// 127.0.0.1 is allowlisted in the e2e stack: its redirect is the next hop.
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://[::1%251]:"+port+"/latest/meta-data/", http.StatusFound)
	}))
	defer front.Close()

	e := startStack(t, nil)
	urls := []string{
		"http://[::1%251]:" + port + "/", // issue 11
		"http://[::1%25lo]:" + port + "/",
		"http://[0:0:0:0:0:0:0:1%251]:" + port + "/",
		"http://[::1]:" + port + "/",
		"http://user@[::1%251]:" + port + "/",
		"http://[::ffff:169.254.169.254%251]:" + port + "/",
		"http://[fd00:ec2::254%251]:" + port + "/latest/meta-data/",
		front.URL + "/redirect",
	}
	ids := make([]string, len(urls))
	for i, u := range urls {
		ids[i] = e.submit(map[string]any{"type": "http", "payload": map[string]any{"method": "GET", "url": u}})
	}
	for i, id := range ids {
		var j map[string]any
		waitFor(t, 30*time.Second, "http job "+urls[i]+" finished", func() bool {
			j = e.job(id)
			return j["status"] == "dead" || j["status"] == "succeeded"
		})
		le, _ := j["last_error"].(map[string]any)
		if j["status"] != "dead" || j["attempt"] != 1.0 || le["class"] != "permanent" || !strings.Contains(fmt.Sprint(le["message"]), "refused") {
			t.Errorf("http job to %s: %v after attempt %v, last_error %v; want dead after one permanent attempt refused by the guard", urls[i], j["status"], j["attempt"], le)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the [::1] listener saw %d requests", n)
	}
	e.othersUnaffected(t)
}
