package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Version is the version of this package, sent in the default User-Agent.
const Version = "0.1.0"

// IdempotencyKeyHeader is the request header Ferry deduplicates submissions by.
const IdempotencyKeyHeader = "Idempotency-Key"

// maxErrorBody bounds how much of an error answer is read: an error body is
// small, and a misbehaving proxy must not make the client buffer gigabytes.
const maxErrorBody = 1 << 20

// Client calls one Ferry deployment with one API key. It is safe for
// concurrent use.
type Client struct {
	base   *url.URL
	key    string
	hc     *http.Client
	retry  RetryPolicy
	ua     string
	tenant string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the http.Client requests go through (timeouts, proxies,
// TLS, tracing transports). Its Timeout, if any, also bounds event streams,
// so leave it zero and use contexts when you stream events.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRetry sets the retry policy; see RetryPolicy.
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.retry = p.withDefaults() } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.ua = ua } }

// WithTenant makes the operator (admin) key act for tenant id through the
// Ferry-Tenant header. Tenant keys do not need it.
func WithTenant(id string) Option { return func(c *Client) { c.tenant = id } }

// New returns a client of the Ferry API at baseURL (for example
// "http://127.0.0.1:8080") authenticating with apiKey.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("ferry client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("ferry client: base URL %q must be http(s)://host[:port]", baseURL)
	}
	c := &Client{base: u, key: apiKey, hc: http.DefaultClient, retry: RetryPolicy{}.withDefaults(),
		ua: "ferry-go/" + Version}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// NewIdempotencyKey returns a random key (128 bits) for a submission.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24 documents it)
	return "ferry-go-" + hex.EncodeToString(b[:])
}

// call is one API operation: everything needed to send it again.
type call struct {
	method string
	path   string
	query  url.Values
	body   []byte // sent identically on every attempt
	header http.Header
	// idempotent says the request may be sent again after a network error
	// or a gateway error: a read, or a write Ferry deduplicates (an
	// Idempotency-Key, a re-drive, a cancel).
	idempotent bool
}

func newCall(method, path string, body any) (*call, error) {
	c := &call{method: method, path: path, header: http.Header{}, idempotent: method == http.MethodGet}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("ferry client: encode %s %s: %w", method, path, err)
		}
		c.body = b
	}
	return c, nil
}

// request builds one attempt of cl.
func (c *Client) request(ctx context.Context, cl *call) (*http.Request, error) {
	u := *c.base
	// cl.path is escaped (ids go through pathEscape): keep it as the raw
	// path, so an id with a "/" or "%" reaches the server as one segment.
	u.RawPath = c.base.EscapedPath() + cl.path
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return nil, fmt.Errorf("ferry client: path %q: %w", cl.path, err)
	}
	u.Path = p
	u.RawQuery = cl.query.Encode()
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("ferry client: %w", err)
	}
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if c.tenant != "" {
		req.Header.Set("Ferry-Tenant", c.tenant)
	}
	req.Header.Set("User-Agent", c.ua)
	return req, nil
}

// response is a fully read answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends cl, retrying as the policy allows, and returns the first answer
// that is not retried. Answers ≥ 400 come back as *APIError, with the
// response too (a batch's 422 and a cancel's 409 carry data).
func (c *Client) do(ctx context.Context, cl *call) (*response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := c.once(ctx, cl)
		wait, retry := c.retry.decide(cl, attempt, resp, err)
		if !retry {
			if err != nil {
				return nil, err
			}
			if resp.status >= 400 {
				return resp, parseError(resp)
			}
			return resp, nil
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// once sends one attempt and reads the whole answer. A failure to send or
// to read is a *NetworkError: the request may or may not have been applied.
func (c *Client) once(ctx context.Context, cl *call) (*response, error) {
	req, err := c.request(ctx, cl)
	if err != nil {
		return nil, err
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return nil, c.netErr(ctx, cl, err)
	}
	defer res.Body.Close()
	var r io.Reader = res.Body
	if res.StatusCode >= 400 {
		r = io.LimitReader(res.Body, maxErrorBody)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, c.netErr(ctx, cl, err)
	}
	return &response{status: res.StatusCode, header: res.Header, body: b}, nil
}

func (c *Client) netErr(ctx context.Context, cl *call, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("ferry client: %s %s: %w", cl.method, cl.path, ctx.Err())
	}
	return &NetworkError{Method: cl.method, Path: cl.path, Err: err}
}

// NetworkError is a request that failed before a complete answer arrived:
// the server may or may not have applied it. Calls that Ferry deduplicates
// are retried; others are returned as this error.
type NetworkError struct {
	Method, Path string
	Err          error
}

func (e *NetworkError) Error() string {
	return fmt.Sprintf("ferry client: %s %s: %v", e.Method, e.Path, e.Err)
}

func (e *NetworkError) Unwrap() error { return e.Err }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("ferry client: waiting to retry: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

// decode runs cl and decodes a successful answer into out (when not nil).
func (c *Client) decode(ctx context.Context, cl *call, out any) (*response, error) {
	resp, err := c.do(ctx, cl)
	if err != nil {
		return resp, err
	}
	if out != nil && len(resp.body) > 0 {
		if err := json.Unmarshal(resp.body, out); err != nil {
			return resp, fmt.Errorf("ferry client: decode %s %s answer: %w", cl.method, cl.path, err)
		}
	}
	return resp, nil
}

// pathEscape escapes one path segment (an id).
func pathEscape(s string) string { return url.PathEscape(s) }

var errEmptyID = errors.New("ferry client: empty id")

// Raw calls a route this package has no typed method for (such as the
// operator routes under /v1/admin) and returns the answer's body: path is escaped by the
// caller, body (nil for none) is sent as JSON. Errors, retries of 429 and
// 503 and of reads after network errors are those of every call; a write
// is not resent after a network error, since it may have been applied.
func (c *Client) Raw(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	cl, err := newCall(method, path, body)
	if err != nil {
		return nil, err
	}
	cl.query = query
	resp, err := c.do(ctx, cl)
	if err != nil {
		return nil, err
	}
	return resp.body, nil
}
