package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

const maxResponseBytes = 64 << 20

// client calls the Ferry HTTP API.
type client struct {
	base string // no trailing slash
	key  string
	http *http.Client
}

func newClient(base, key string) *client {
	return &client{base: base, key: key, http: &http.Client{Timeout: 60 * time.Second}}
}

// apiError is an error answer of the API:
// {"error": {"code", "message", "request_id", "fields"?}}.
type apiError struct {
	Status    int             `json:"-"`
	Code      string          `json:"code"`
	Message   string          `json:"message"`
	RequestID string          `json:"request_id"`
	Fields    json.RawMessage `json:"fields"`
	Body      string          `json:"-"` // the raw body when it was not an API error document
}

func (e *apiError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return e.Code + ": " + e.Message
}

// do sends a request and returns the raw body of a 2xx answer. A non-2xx
// answer is returned as an *apiError.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body []byte, header http.Header) ([]byte, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "ferry-cli")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading response: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ae := &apiError{Status: resp.StatusCode}
		var doc struct {
			Error *apiError `json:"error"`
		}
		if json.Unmarshal(raw, &doc) == nil && doc.Error != nil && doc.Error.Code != "" {
			doc.Error.Status = resp.StatusCode
			return nil, doc.Error
		}
		ae.Body = strings.TrimSpace(string(raw))
		return nil, ae
	}
	return raw, nil
}

// fail renders err on stderr and returns exitError. API errors print as
// "error: <code>: <message>", then one indented line per invalid field and
// the request id.
func (r *runner) fail(err error) int {
	ae, ok := err.(*apiError)
	if !ok {
		fmt.Fprintf(r.stderr, "error: %v\n", err)
		return exitError
	}
	if ae.Code == "" {
		msg := ae.Body
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
	for _, f := range fieldLines(ae.Fields) {
		fmt.Fprintf(r.stderr, "  %s\n", f)
	}
	if ae.RequestID != "" {
		fmt.Fprintf(r.stderr, "  request_id: %s\n", ae.RequestID)
	}
	return exitError
}

// fieldLines renders the "fields" of an API error, which may be an object
// (field → message or messages) or a list of {"field","message"} objects.
func fieldLines(raw json.RawMessage) []string {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil {
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		lines := make([]string, 0, len(keys))
		for _, k := range keys {
			lines = append(lines, k+": "+plain(obj[k]))
		}
		return lines
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		lines := make([]string, 0, len(list))
		for _, item := range list {
			var f struct {
				Field   string `json:"field"`
				Name    string `json:"name"`
				Message string `json:"message"`
			}
			if json.Unmarshal(item, &f) == nil && (f.Field != "" || f.Name != "") {
				name := f.Field
				if name == "" {
					name = f.Name
				}
				lines = append(lines, name+": "+f.Message)
				continue
			}
			lines = append(lines, plain(item))
		}
		return lines
	}
	return []string{string(raw)}
}

// plain renders a JSON value for humans: strings unquoted, lists of strings
// joined with "; ", anything else as compact JSON.
func plain(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		return strings.Join(ss, "; ")
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		return buf.String()
	}
	return string(raw)
}
