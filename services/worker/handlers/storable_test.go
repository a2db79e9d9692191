package handlers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ferryhq/ferry/events/schema"
)

// TestHTTPResultStorable: whatever a target answers, the result (and the
// error text of a failed answer) is storable by every projection: binary
// bodies as base64 with the marker, JSON jsonb cannot hold as text.
func TestHTTPResultStorable(t *testing.T) {
	binary := []byte{0x89, 'P', 'N', 'G', 0, 0, 0, 0x0d, 0xff, 0xfe, 0}
	latin1 := []byte("caf\xe9")
	cut := bytes.Repeat([]byte("é"), MaxResponseBody) // 2 bytes each: cut mid-rune or not
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/binary":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(binary)
		case "/latin1":
			w.Header().Set("Content-Type", "text/plain; charset=iso-8859-1")
			w.Write(latin1)
		case "/nul-json":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"a":"x\u0000y"}`))
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"a":"<ok>"}`))
		case "/cut":
			w.Write(append([]byte("x"), cut...))
		case "/500":
			w.WriteHeader(500)
			w.Write([]byte("boom\x00\xff" + strings.Repeat("z", 1000)))
		}
	}))
	defer srv.Close()
	h := NewHTTP(Options{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	get := func(path string) (HTTPResult, []byte, error) {
		res, err := h.Handle(context.Background(), job("http", `{"url":"`+srv.URL+path+`"}`))
		if err != nil {
			return HTTPResult{}, nil, err
		}
		b, err := json.Marshal(res)
		if err == nil {
			err = schema.CheckJSON(b)
		}
		return res.(HTTPResult), b, err
	}
	for _, c := range []struct {
		path string
		raw  []byte
	}{{"/binary", binary}, {"/latin1", latin1}} {
		r, b, err := get(c.path)
		if err != nil || r.Encoding != "base64" || r.Body != nil {
			t.Fatalf("%s: %s %v", c.path, b, err)
		}
		if got, _ := base64.StdEncoding.DecodeString(r.BodyBase64); !bytes.Equal(got, c.raw) {
			t.Fatalf("%s: base64 body %q decodes to %q", c.path, r.BodyBase64, got)
		}
	}
	if r, b, err := get("/nul-json"); err != nil || r.Body != `{"a":"x\u0000y"}` || r.Encoding != "" {
		t.Fatalf("JSON with \\u0000 is kept as text: %s %v", b, err)
	}
	if r, b, err := get("/json"); err != nil || string(r.Body.(json.RawMessage)) != `{"a":"<ok>"}` {
		t.Fatalf("storable JSON stays JSON: %s %v", b, err)
	}
	if r, b, err := get("/cut"); err != nil || !r.Truncated || r.Encoding != "" || !strings.HasPrefix(r.Body.(string), "xé") {
		t.Fatalf("text cut mid-character stays text: %.100s %v", b, err)
	}
	_, _, err := get("/500")
	if err == nil || schema.CheckText(err.Error()) != nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("error text quoting a binary answer: %q", err)
	}
}
