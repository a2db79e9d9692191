package handlers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/outbound"
	"github.com/ferryhq/ferry/platform/signing"
	"github.com/ferryhq/ferry/services/worker/workertype"
)

// Limits of the http handler.
const (
	// MaxResponseBody is how much of a response body a result keeps.
	MaxResponseBody = 64 << 10
	// DefaultHTTPTimeout bounds a request whose payload sets no timeout.
	DefaultHTTPTimeout = 30 * time.Second
	// MaxHTTPTimeout bounds the timeout a payload may ask for.
	MaxHTTPTimeout = 15 * time.Minute
	// maxRetryAfter caps the Retry-After hint passed on.
	maxRetryAfter = 24 * time.Hour
)

// Response headers copied into the result.
var resultHeaders = []string{"Content-Type", "Content-Length", "Location", "Etag", "Last-Modified", "Retry-After", "X-Request-Id"}

// HTTPRequest is the payload of the http handler.
type HTTPRequest struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	// Body is sent as is when it is a JSON string, else as JSON (with
	// Content-Type application/json unless a header sets one).
	Body    json.RawMessage `json:"body"`
	Timeout schema.Duration `json:"timeout"`
	// Async lets the receiver take the job: its request carries a callback
	// URL and token, and a 202 Accepted answer hands the attempt over (see
	// docs/http-jobs.md, "Async completion").
	Async bool `json:"async"`
	// Lease is how long an async job's receiver may go between two
	// reports. Defaults to the worker's FERRY_HTTP_ASYNC_LEASE.
	Lease schema.Duration `json:"lease"`
}

// HTTPResult is the result of a 2xx answer. The body is kept in the form
// every projection can store: JSON as JSON, text as a string, anything else
// (bytes that are not UTF-8, or hold NUL) as base64 in BodyBase64 with
// Encoding "base64".
type HTTPResult struct {
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       any               `json:"body,omitempty"`
	BodyBase64 string            `json:"body_base64,omitempty"`
	Encoding   string            `json:"encoding,omitempty"`
	Truncated  bool              `json:"truncated,omitempty"`
}

// HTTP is the http handler.
type HTTP struct {
	client     *http.Client
	signer     Signer
	callbacks  Callbacks
	asyncLease time.Duration
}

// NewHTTP returns the http handler, its client guarded against SSRF and its
// requests signed with the keys of o.Signer.
func NewHTTP(o Options) *HTTP {
	lease := o.AsyncLease
	if lease == 0 {
		lease = DefaultAsyncLease
	}
	return &HTTP{client: outbound.NewClient(outbound.Options{Allow: o.Allow, Timeout: MaxHTTPTimeout}), signer: o.Signer,
		callbacks: o.Callbacks, asyncLease: lease}
}

// Handle runs one http job.
func (h *HTTP) Handle(ctx context.Context, job *workertype.Job) (any, error) {
	var p HTTPRequest
	if err := decode(job, &p); err != nil {
		return nil, err
	}
	req, body, timeout, err := p.build(ctx)
	if err == nil {
		err = p.checkAsync()
	}
	if err != nil {
		return nil, workertype.Permanent(fmt.Errorf("http: %w", err))
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, errRequestTimeout)
	defer cancel()
	req = req.WithContext(ctx)
	if err := h.identify(ctx, req, job, body); err != nil {
		return nil, err
	}
	var async *asyncAttempt
	if p.Async {
		if async, err = h.grantAsync(ctx, req, job, cmp.Or(p.Lease.D(), h.asyncLease)); err != nil {
			return nil, err
		}
		defer async.settle(ctx)
	}

	resp, err := h.client.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, outbound.ErrBlocked):
			return nil, workertype.Permanent(fmt.Errorf("http: %w", err))
		case errors.Is(err, outbound.ErrTooManyRedirects):
			return nil, workertype.Permanent(fmt.Errorf("http: %w", err))
		case errors.Is(context.Cause(ctx), errRequestTimeout):
			return nil, fmt.Errorf("http: %s %s: no answer within %s: %w", p.Method, redact(req.URL), timeout, context.DeadlineExceeded)
		case ctx.Err() != nil:
			// The job was cancelled or timed out: the runtime reports it.
			return nil, ctx.Err()
		}
		return nil, workertype.Retryable(fmt.Errorf("http: %s %s: %w", req.Method, redact(req.URL), unwrapURLError(err)), 0)
	}
	defer resp.Body.Close()
	if d := async.handOver(resp); d != nil {
		return nil, d
	}
	answer, truncated, rerr := outbound.ReadBody(resp.Body, MaxResponseBody)

	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		if rerr != nil {
			return nil, workertype.Retryable(fmt.Errorf("http: reading response: %w", rerr), 0)
		}
		return resultOf(resp, answer, truncated), nil
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return nil, workertype.Retryable(statusError(req, resp, answer), retryAfter(resp.Header.Get("Retry-After"), time.Now()))
	default:
		return nil, workertype.Permanent(statusError(req, resp, answer))
	}
}

// identify sets the headers that tell the receiver who calls: Ferry-Job-Id,
// Ferry-Attempt, Ferry-Tenant and the Standard Webhooks webhook-id
// (<job id>_a<attempt>, the same on a repeated dispatch of one attempt),
// webhook-timestamp and, once the tenant has a signing secret,
// webhook-signature. They replace any the payload set, so a payload cannot
// forge them. A secret that cannot be read fails the attempt (retryable):
// a request is never sent unsigned for a tenant that has a secret.
func (h *HTTP) identify(ctx context.Context, req *http.Request, job *workertype.Job, body []byte) error {
	req.Header.Set("Ferry-Job-Id", job.ID)
	req.Header.Set("Ferry-Attempt", strconv.Itoa(job.Attempt))
	req.Header.Set("Ferry-Tenant", job.TenantID)
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "ferry-worker")
	}
	now := time.Now()
	var keys [][]byte
	if h.signer != nil {
		var err error
		if keys, err = h.signer.Keys(ctx, job.TenantID, now); err != nil {
			return workertype.Retryable(fmt.Errorf("http: signing the request: %w", err), 0)
		}
	}
	id := fmt.Sprintf("%s_a%d", job.ID, job.Attempt)
	signing.SetHeaders(req.Header, keys, id, now, body)
	if len(keys) == 0 {
		req.Header.Del(signing.HeaderSignature)
	}
	return nil
}

var errRequestTimeout = errors.New("http: request timeout")

// checkAsync refuses a lease out of bounds, or on a job that is not async.
func (p HTTPRequest) checkAsync() error {
	switch {
	case p.Lease == 0:
		return nil
	case !p.Async:
		return errors.New("lease is for async jobs only (set async: true)")
	}
	return CheckAsyncLease(p.Lease.D(), "lease")
}

// build returns the request of p, the body it sends (which the signature
// covers) and its timeout.
func (p HTTPRequest) build(ctx context.Context) (*http.Request, []byte, time.Duration, error) {
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, 0, fmt.Errorf("url must be an absolute http or https URL, got %q", p.URL)
	}
	method := strings.ToUpper(strings.TrimSpace(p.Method))
	if method == "" {
		method = http.MethodGet
		if len(p.Body) > 0 && string(p.Body) != "null" {
			method = http.MethodPost
		}
	}
	timeout := p.Timeout.D()
	switch {
	case timeout < 0:
		return nil, nil, 0, errors.New("timeout must be positive")
	case timeout == 0:
		timeout = DefaultHTTPTimeout
	case timeout > MaxHTTPTimeout:
		timeout = MaxHTTPTimeout
	}
	var body []byte
	contentType := ""
	if len(p.Body) > 0 && string(p.Body) != "null" {
		var s string
		if json.Unmarshal(p.Body, &s) == nil {
			body = []byte(s)
		} else {
			body = p.Body
			contentType = "application/json"
		}
	}
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), reader)
	if err != nil {
		return nil, nil, 0, err
	}
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	if contentType != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req, body, timeout, nil
}

func resultOf(resp *http.Response, body []byte, truncated bool) HTTPResult {
	res := HTTPResult{Status: resp.StatusCode, Truncated: truncated, Headers: map[string]string{}}
	for _, k := range resultHeaders {
		if v := resp.Header.Get(k); v != "" {
			res.Headers[k] = v
		}
	}
	if len(body) == 0 {
		return res
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if truncated {
		body = trimPartialRune(body)
	}
	switch {
	case !truncated && (mt == "application/json" || strings.HasSuffix(mt, "+json")) && json.Valid(body) && schema.CheckJSON(body) == nil:
		res.Body = json.RawMessage(body)
	case utf8.Valid(body) && bytes.IndexByte(body, 0) < 0:
		// Text, including JSON jsonb could not hold as JSON (a \u0000
		// escape is six plain characters in a string).
		res.Body = string(body)
	default:
		res.BodyBase64, res.Encoding = base64.StdEncoding.EncodeToString(body), "base64"
	}
	return res
}

// trimPartialRune drops an incomplete UTF-8 sequence a cut left at the end
// of b, so a truncated text body stays text.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

func statusError(req *http.Request, resp *http.Response, body []byte) error {
	snippet := strings.TrimSpace(schema.SanitizeText(string(trimPartialRune(body[:min(len(body), 512)])), 0))
	if snippet != "" {
		snippet = ": " + snippet
	}
	return fmt.Errorf("http: %s %s answered %s%s", req.Method, redact(req.URL), resp.Status, snippet)
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// redact drops credentials and the query from a URL shown in an error.
func redact(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.Fragment = ""
	return c.String()
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
