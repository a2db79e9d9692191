package httpx

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Pagination is the same on every list route of every service:
//
//   - `limit` is an integer from 1 to the route's maximum; absent, the
//     route's default. Anything else answers 400 invalid_parameter with
//     fields {"limit": ...} ([ParseLimit]).
//   - `cursor` is an opaque token the route returned as next_cursor; absent
//     or empty, the first page. One the route did not issue answers 400
//     invalid_cursor ([CursorParam], [DecodeCursor]).
//   - The answer is {"<items>": [...], "next_cursor": "..."}: items is never
//     null and next_cursor is always present, "" on the last page
//     ([WriteList]).

// ParseLimit reads the limit query parameter of r: def when it is absent,
// else an integer from 1 to max. Any other value is a 400 invalid_parameter
// *Error naming the field "limit".
func ParseLimit(r *http.Request, def, max int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		msg := fmt.Sprintf("must be an integer from 1 to %d", max)
		e := Errorf(http.StatusBadRequest, "invalid_parameter", "limit %s", msg)
		e.Fields = map[string]string{"limit": msg}
		return 0, e
	}
	return n, nil
}

// ErrInvalidCursor answers a cursor the route did not issue.
var ErrInvalidCursor = &Error{Status: http.StatusBadRequest, Code: "invalid_cursor",
	Message: "cursor is not one this API returned", Fields: map[string]string{"cursor": "is not one this API returned"}}

// EncodeCursor returns v (a small struct holding a keyset position) as an
// opaque cursor: the unpadded base64url of its JSON.
func EncodeCursor(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("httpx: cursor %T does not marshal: %v", v, err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor decodes a cursor made by [EncodeCursor] into v, refusing
// unknown fields. Any failure is [ErrInvalidCursor]; callers check the
// decoded fields and answer ErrInvalidCursor when they are incomplete.
func DecodeCursor(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return ErrInvalidCursor
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return ErrInvalidCursor
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrInvalidCursor
	}
	return nil
}

// CursorParam decodes the cursor query parameter of r into v. It reports
// false, leaving v alone, when the parameter is absent or empty (the first
// page).
func CursorParam(r *http.Request, v any) (bool, error) {
	s := r.URL.Query().Get("cursor")
	if s == "" {
		return false, nil
	}
	if err := DecodeCursor(s, v); err != nil {
		return false, err
	}
	return true, nil
}

// Keyset is the cursor position of most lists: the sort time (if any) and
// the id of the last item of the page.
type Keyset struct {
	T  time.Time `json:"t,omitzero"`
	ID string    `json:"id"`
}

// String returns k as an opaque cursor.
func (k Keyset) String() string { return EncodeCursor(k) }

// KeysetParam reads the cursor query parameter of r as a [Keyset]: nil for
// the first page, [ErrInvalidCursor] for a cursor without an id.
func KeysetParam(r *http.Request) (*Keyset, error) {
	var k Keyset
	ok, err := CursorParam(r, &k)
	if err != nil || !ok {
		return nil, err
	}
	if k.ID == "" {
		return nil, ErrInvalidCursor
	}
	return &k, nil
}

// TrimPage cuts items, read with a limit of limit+1, to one page and returns
// the page's next_cursor: cursor(last item of the page) when more items
// follow, "" on the last page.
func TrimPage[T any](items []T, limit int, cursor func(T) string) ([]T, string) {
	if len(items) <= limit {
		return items, ""
	}
	items = items[:limit]
	return items, cursor(items[limit-1])
}

// WriteList answers 200 with one page of a list: {key: items, "next_cursor":
// next}. A nil items is sent as [] and next is "" on the last page.
func WriteList[T any](w http.ResponseWriter, key string, items []T, next string) {
	if items == nil {
		items = []T{}
	}
	WriteJSON(w, http.StatusOK, map[string]any{key: items, "next_cursor": next})
}
