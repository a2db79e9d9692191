package httpx_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/httpx"
)

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  int
		ok    bool
	}{
		{"", 50, true}, {"limit=1", 1, true}, {"limit=500", 500, true},
		{"limit=0", 0, false}, {"limit=501", 0, false}, {"limit=-1", 0, false}, {"limit=x", 0, false}, {"limit=1.5", 0, false},
	} {
		r := httptest.NewRequest("GET", "/v1/things?"+tc.query, nil)
		n, err := httpx.ParseLimit(r, 50, 500)
		if tc.ok {
			if err != nil || n != tc.want {
				t.Errorf("%q: %d, %v; want %d", tc.query, n, err, tc.want)
			}
			continue
		}
		var e *httpx.Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != "invalid_parameter" || e.Fields["limit"] != "must be an integer from 1 to 500" {
			t.Errorf("%q: %d, %#v", tc.query, n, err)
		}
	}
}

func TestCursorRoundTrip(t *testing.T) {
	type pos struct {
		T  time.Time `json:"t"`
		ID string    `json:"id"`
	}
	in := pos{T: time.Date(2031, 3, 1, 12, 0, 0, 123456000, time.UTC), ID: "job_1"}
	s := httpx.EncodeCursor(in)
	r := httptest.NewRequest("GET", "/v1/things?cursor="+s, nil)
	var out pos
	if ok, err := httpx.CursorParam(r, &out); !ok || err != nil || !out.T.Equal(in.T) || out.ID != in.ID {
		t.Fatalf("%q → %+v, %v, %v", s, out, ok, err)
	}
	if ok, err := httpx.CursorParam(httptest.NewRequest("GET", "/v1/things?cursor=", nil), &out); ok || err != nil {
		t.Fatalf("empty cursor: %v, %v", ok, err)
	}
	for _, bad := range []string{"!!", "bm90LWEtY3Vyc29y", httpx.EncodeCursor(map[string]int{"seq": 1}), httpx.EncodeCursor(in) + "x"} {
		err := httpx.DecodeCursor(bad, &pos{})
		var e *httpx.Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != "invalid_cursor" {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestWriteListAlwaysSendsItemsAndNextCursor(t *testing.T) {
	w := httptest.NewRecorder()
	httpx.WriteList[int](w, "things", nil, "")
	if got := w.Body.String(); got != `{"next_cursor":"","things":[]}`+"\n" {
		t.Fatalf("body %s", got)
	}
	w = httptest.NewRecorder()
	httpx.WriteList(w, "things", []int{1, 2}, "abc")
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 200 || body["next_cursor"] != "abc" || len(body["things"].([]any)) != 2 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}

func TestKeysetAndTrimPage(t *testing.T) {
	k := httpx.Keyset{ID: "wh_1"}
	got, err := httpx.KeysetParam(httptest.NewRequest("GET", "/v1/things?cursor="+k.String(), nil))
	if err != nil || got == nil || *got != k {
		t.Fatalf("%+v, %v", got, err)
	}
	if got, err := httpx.KeysetParam(httptest.NewRequest("GET", "/v1/things", nil)); got != nil || err != nil {
		t.Fatalf("first page: %+v, %v", got, err)
	}
	if _, err := httpx.KeysetParam(httptest.NewRequest("GET", "/v1/things?cursor="+httpx.EncodeCursor(map[string]string{"t": "2031-03-01T00:00:00Z"}), nil)); err != httpx.ErrInvalidCursor {
		t.Fatalf("cursor without id: %v", err)
	}
	str := func(n int) string { return string(rune('a' + n)) }
	if page, next := httpx.TrimPage([]int{0, 1, 2}, 2, str); len(page) != 2 || next != "b" {
		t.Fatalf("%v %q", page, next)
	}
	if page, next := httpx.TrimPage([]int{0, 1}, 2, str); len(page) != 2 || next != "" {
		t.Fatalf("%v %q", page, next)
	}
}
