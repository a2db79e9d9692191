package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferryhq/ferry/client"
)

const maxResponseBytes = 64 << 20

// newAPIClient returns the Go client the commands call the API through,
// and the recorder of its answers that --json prints.
func newAPIClient(base, key string) (*client.Client, *rawRecorder, error) {
	rec := &rawRecorder{next: http.DefaultTransport}
	c, err := client.New(base, key,
		client.WithHTTPClient(&http.Client{Timeout: 60 * time.Second, Transport: rec}),
		client.WithUserAgent("ferry-cli"))
	return c, rec, err
}

// rawRecorder is the transport of the CLI's client: it keeps the body of
// the last answer, so --json prints exactly what the API sent rather than
// the client's decoding of it.
type rawRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	last []byte
}

func (r *rawRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes))
	res.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading response: %w", req.Method, req.URL.Path, err)
	}
	r.mu.Lock()
	r.last = body
	r.mu.Unlock()
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}

// body returns the body of the last answer.
func (r *rawRecorder) body() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// fail renders err on stderr and returns exitError. API errors print as
// "error: <code>: <message>", then one indented line per invalid field and
// the request id; an answer that is not Ferry's JSON (a proxy's page) as
// "error: HTTP <status>: <body>".
func (r *runner) fail(err error) int {
	var ae *client.APIError
	if !errors.As(err, &ae) {
		fmt.Fprintf(r.stderr, "error: %v\n", err)
		return exitError
	}
	if ae.Code == fmt.Sprintf("http_%d", ae.Status) { // the client's code for a non-Ferry answer
		msg := strings.TrimSpace(string(ae.Body))
		if len(msg) > 500 {
			msg = msg[:500] + "…"
		}
		if msg == "" {
			msg = http.StatusText(ae.Status)
		}
		fmt.Fprintf(r.stderr, "error: HTTP %d: %s\n", ae.Status, msg)
		return exitError
	}
	fmt.Fprintf(r.stderr, "error: %s: %s\n", ae.Code, ae.Message)
	names := make([]string, 0, len(ae.Fields))
	for k := range ae.Fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(r.stderr, "  %s: %s\n", k, ae.Fields[k])
	}
	if ae.RequestID != "" {
		fmt.Fprintf(r.stderr, "  request_id: %s\n", ae.RequestID)
	}
	return exitError
}

// plain renders a JSON value for humans: a string unquoted, a list of
// strings joined with "; ", anything else as compact JSON.
func plain(raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	switch v := v.(type) {
	case string:
		return v
	case []any:
		if ss, ok := allStrings(v); ok {
			return strings.Join(ss, "; ")
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		return buf.String()
	}
	return string(raw)
}

func allStrings(vs []any) ([]string, bool) {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		s, ok := v.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}
