// Package outbound builds the HTTP clients Ferry uses to call systems it does
// not control (the worker's `http` handler, webhooks), guarded against
// server-side request forgery (SSRF).
//
// The guard runs in the dialer (net.Dialer.Control), so it sees the address
// actually being connected to after DNS resolution: a host name that resolves
// to a private address, a DNS answer that changes between check and use
// (rebinding), and a redirect to an internal host are all refused the same
// way. Loopback, private (RFC 1918, IPv6 ULA), link-local (which includes the
// cloud metadata address 169.254.169.254), CGNAT, unspecified, multicast,
// broadcast and other reserved addresses are refused unless they fall inside
// an operator allowlist (FERRY_OUTBOUND_ALLOW).
//
// A refused connection fails with a *[BlockedError], which matches
// [ErrBlocked] under errors.Is, through the *url.Error and *net.OpError the
// HTTP client wraps it in.
package outbound

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrBlocked matches every error caused by the SSRF guard refusing an address.
var ErrBlocked = errors.New("outbound: destination address is not allowed")

// ErrTooManyRedirects is returned (wrapped in a *url.Error) when a response
// chain is longer than Options.MaxRedirects.
var ErrTooManyRedirects = errors.New("outbound: too many redirects")

// BlockedError says which address the guard refused and why.
type BlockedError struct {
	// Addr is the resolved address the client tried to connect to.
	Addr netip.Addr
	// Reason names the refused range, e.g. "loopback" or "private".
	Reason string
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("outbound: connection to %s refused: %s address (allowlist it with FERRY_OUTBOUND_ALLOW)", e.Addr, e.Reason)
}

// Is makes errors.Is(err, ErrBlocked) true.
func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }

// Options configure [NewClient].
type Options struct {
	// Allow lists prefixes that may be reached even though they are in a
	// refused range. Defaults to none.
	Allow []netip.Prefix
	// Timeout bounds a whole request, redirects and body included (the
	// http.Client Timeout). Defaults to 30s; a request context may set a
	// shorter deadline.
	Timeout time.Duration
	// DialTimeout bounds one TCP connect. Defaults to 10s.
	DialTimeout time.Duration
	// MaxRedirects is how many redirects a request follows. Defaults to 5;
	// a negative value follows none and returns the 3xx response.
	MaxRedirects int
	// MaxIdleConnsPerHost is kept per host for reuse. Defaults to 16.
	MaxIdleConnsPerHost int
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.MaxRedirects == 0 {
		o.MaxRedirects = 5
	}
	if o.MaxIdleConnsPerHost == 0 {
		o.MaxIdleConnsPerHost = 16
	}
	return o
}

// NewClient returns an *http.Client whose every connection goes through the
// SSRF guard. It never uses a proxy from the environment: a proxy would make
// the guard check the proxy's address instead of the destination's.
func NewClient(o Options) *http.Client {
	o = o.WithDefaults()
	return &http.Client{
		Transport: NewTransport(o),
		Timeout:   o.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if o.MaxRedirects < 0 {
				return http.ErrUseLastResponse
			}
			if len(via) > o.MaxRedirects {
				return fmt.Errorf("%w (%d)", ErrTooManyRedirects, o.MaxRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("outbound: redirect to unsupported scheme %q", req.URL.Scheme)
			}
			return nil
		},
	}
}

// NewTransport returns the guarded transport NewClient uses, for callers
// that build their own client around it.
func NewTransport(o Options) *http.Transport {
	o = o.WithDefaults()
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           Dialer(o),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: o.Timeout,
	}
}

// CheckAddress checks a dialled "ip:port" (as net.Dialer.Control receives
// it) against the guard. It returns a *BlockedError for a refused address.
func CheckAddress(address string, allow []netip.Prefix) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Control always receives a resolved IP; anything else is refused.
		host, _, _ := net.SplitHostPort(address)
		a, perr := netip.ParseAddr(host)
		if perr != nil {
			return &BlockedError{Reason: "unresolved (" + address + ")"}
		}
		ap = netip.AddrPortFrom(a, 0)
	}
	if reason, blocked := Blocked(ap.Addr(), allow); blocked {
		return &BlockedError{Addr: Canonical(ap.Addr()), Reason: reason}
	}
	return nil
}

type rangeSpec struct {
	prefix netip.Prefix
	reason string
}

var refused = func() []rangeSpec {
	specs := []struct{ cidr, reason string }{
		{"0.0.0.0/8", "unspecified"},
		{"127.0.0.0/8", "loopback"},
		{"10.0.0.0/8", "private"},
		{"172.16.0.0/12", "private"},
		{"192.168.0.0/16", "private"},
		{"100.64.0.0/10", "CGNAT"},       // includes the Alibaba metadata address 100.100.100.200
		{"169.254.0.0/16", "link-local"}, // includes the cloud metadata address 169.254.169.254
		{"192.0.0.0/24", "reserved"},
		{"192.0.2.0/24", "reserved"},
		{"192.88.99.0/24", "reserved"}, // 6to4 relay anycast
		{"198.18.0.0/15", "reserved"},
		{"198.51.100.0/24", "reserved"},
		{"203.0.113.0/24", "reserved"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved"}, // includes broadcast 255.255.255.255
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "reserved"},          // IPv4-compatible (deprecated)
		{"64:ff9b:1::/48", "reserved"}, // local-use NAT64 (RFC 8215): translates to anything, public or not
		{"100::/64", "reserved"},
		{"2001::/32", "reserved"}, // Teredo: tunnels to an IPv4 address hidden in the bits
		{"2001:db8::/32", "reserved"},
		{"fc00::/7", "private"}, // ULA; includes AWS's fd00:ec2::254 metadata address
		{"fe80::/10", "link-local"},
		{"fec0::/10", "reserved"},
		{"ff00::/8", "multicast"},
	}
	out := make([]rangeSpec, len(specs))
	for i, s := range specs {
		out[i] = rangeSpec{netip.MustParsePrefix(s.cidr), s.reason}
	}
	return out
}()

var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4     = netip.MustParsePrefix("2002::/16")
	translated = netip.MustParsePrefix("::ffff:0:0:0/96") // SIIT IPv4-translated (RFC 2765)
)

// Canonical is the form of a every guard check must see: without an IPv6
// zone (which makes netip.Prefix.Contains false) and with an IPv4-mapped
// address (::ffff:a.b.c.d) unmapped to its IPv4 address.
func Canonical(a netip.Addr) netip.Addr {
	return a.WithZone("").Unmap()
}

// embeddedIPv4 returns the IPv4 address an IPv6 translation or tunnelling
// address routes to (NAT64, 6to4, SIIT), so the guard judges where the
// packet really ends up.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case nat64.Contains(a), translated.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixTo4.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// Blocked reports whether the guard refuses a, and the name of the range
// that refuses it. An address inside allow is never refused. IPv4-mapped,
// IPv4-translated, NAT64 and 6to4 IPv6 addresses are judged by the IPv4
// address they embed.
//
// The address is judged without its IPv6 zone (fe80::1%eth0, [::1%1]): a
// zone only picks the interface the packet leaves by, yet
// netip.Prefix.Contains is false for every zoned address, so without
// stripping it first "[fd00:ec2::254%1]" would pass every check.
func Blocked(a netip.Addr, allow []netip.Prefix) (reason string, blocked bool) {
	if !a.IsValid() {
		return "invalid", true
	}
	a = Canonical(a)
	for _, p := range allow {
		if p.Contains(a) {
			return "", false
		}
	}
	if v4, ok := embeddedIPv4(a); ok {
		if reason, blocked := Blocked(v4, allow); blocked {
			return reason + " (embedded in IPv6)", true
		}
	}
	for _, r := range refused {
		if r.prefix.Contains(a) {
			return r.reason, true
		}
	}
	return "", false
}

// ReadBody reads at most limit bytes of r. truncated reports that r had more;
// the rest is left unread (closing a response body without draining it only
// costs the connection's reuse).
func ReadBody(r io.Reader, limit int64) (body []byte, truncated bool, err error) {
	if limit < 0 {
		limit = 0
	}
	body, err = io.ReadAll(io.LimitReader(r, limit+1))
	if int64(len(body)) > limit {
		return body[:limit], true, err
	}
	return body, false, err
}

// Dialer returns a guarded DialContext for non-HTTP callers.
func Dialer(o Options) func(ctx context.Context, network, address string) (net.Conn, error) {
	o = o.WithDefaults()
	allow := append([]netip.Prefix(nil), o.Allow...)
	d := &net.Dialer{
		Timeout:   o.DialTimeout,
		KeepAlive: 30 * time.Second,
		Control:   func(_, address string, _ syscall.RawConn) error { return CheckAddress(address, allow) },
	}
	return d.DialContext
}
