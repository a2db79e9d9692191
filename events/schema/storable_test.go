package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckText(t *testing.T) {
	for s, ok := range map[string]bool{
		"":             true,
		"plain":        true,
		"ünïcode ✓":    true,
		"\uFFFD":       true,
		"a\x00b":       false,
		"\x00":         false,
		"a\xffb":       false,
		"\xed\xa0\x80": false, // a UTF-16 surrogate encoded as UTF-8
	} {
		err := CheckText(s)
		if (err == nil) != ok {
			t.Errorf("CheckText(%q) = %v, want ok=%v", s, err, ok)
		}
		if err != nil && (!errors.Is(err, ErrUnstorable) || strings.HasPrefix(FieldMessage(err), "schema:")) {
			t.Errorf("CheckText(%q): %v, field message %q", s, err, FieldMessage(err))
		}
	}
}

// TestCheckJSON: every kind of value Postgres jsonb refuses is found, with
// its path; everything else passes.
func TestCheckJSON(t *testing.T) {
	bad := map[string]string{ // document → path of the bad value
		`"\u0000"`:                             "$",
		`{"a":{"b":[1,"x\u0000y"]}}`:           "$.a.b[1]",
		`{"a\u0000":1}`:                        `$["a\u0000"]`,
		`["\ud800"]`:                           "$[0]",
		`["\udc00"]`:                           "$[0]",
		`["\ud800\u0041"]`:                     "$[0]",
		`["\ud800x"]`:                          "$[0]",
		"[\"a\xffb\"]":                         "$[0]",
		"{\"k\":\"\xed\xa0\x80\"}":             "$.k",
		`[1e1000000]`:                          "$[0]",
		`[1e309]`:                              "$[0]",
		`[-1.5e309]`:                           "$[0]",
		`[1e-341]`:                             "$[0]",
		`[1e-16384]`:                           "$[0]",
		`[0e-99999]`:                           "$[0]",
		`{"odd key":{"x":[0,"\u0000"]}}`:       `$["odd key"].x[1]`,
		`{"a":1,"b":[{"c":2},{"d":"\u0000"}]}`: "$.b[1].d",
	}
	for doc, path := range bad {
		if !json.Valid([]byte(doc)) {
			t.Fatalf("test document %q is not JSON", doc)
		}
		err := CheckJSON([]byte(doc))
		var ue *UnstorableJSONError
		if !errors.As(err, &ue) || !errors.Is(err, ErrUnstorable) {
			t.Errorf("CheckJSON(%q) = %v, want an *UnstorableJSONError", doc, err)
			continue
		}
		if got := "$" + ue.Path; got != path {
			t.Errorf("CheckJSON(%q) path %q, want %q (%v)", doc, got, path, err)
		}
	}
	good := []string{
		`null`, `"x"`, `{}`, `[]`, `{"a":[1,2,{"b":"c"}],"d":null,"e":true,"f":false}`,
		`"\ud83d\ude00"`, `"😀"`, `"\u0001\u001f"`, `"\\u0000"`, `"\"\\"`, `"\uFFFF"`,
		`[1e308, -1.7976931348623157e308, 1e-340, 0, -0, 0.0, 0e99999, 123456789012345678901234567890]`,
		`{"a" : [ 1 , "b" ] , "c\u0041" : "\n" }`, `"<>&\u2028"`,
	}
	for _, doc := range good {
		if !json.Valid([]byte(doc)) {
			t.Fatalf("test document %q is not JSON", doc)
		}
		if err := CheckJSON([]byte(doc)); err != nil {
			t.Errorf("CheckJSON(%q) = %v, want nil", doc, err)
		}
	}
}

// TestEncodePayloadMatchesMarshal: the bytes EncodePayload returns are the
// bytes encoding/json writes for the payload inside an event, so its length
// is the length produced.
func TestEncodePayloadMatchesMarshal(t *testing.T) {
	raw := []byte(`{ "html": "<a href='x'>&amp;</a>", "ls": "` + "\u2028\u2029" + `", "n": [1, 2.50] }`)
	enc, err := EncodePayload(raw)
	if err != nil {
		t.Fatal(err)
	}
	spec := JobSpec{Type: "t", Payload: raw}
	whole, _ := json.Marshal(spec)
	spec.Payload = enc
	again, _ := json.Marshal(spec)
	if string(whole) != string(again) || !strings.Contains(string(whole), string(enc)) {
		t.Fatalf("EncodePayload %s does not match the marshalled event %s", enc, whole)
	}
	blowup := []byte(`"` + strings.Repeat("<", 1000) + `"`)
	enc, err = EncodePayload(blowup)
	if err != nil || len(enc) != 6*1000+2 {
		t.Fatalf("'<' ×1000 encodes to %d bytes (%v), want %d", len(enc), err, 6*1000+2)
	}
	if _, err := EncodePayload([]byte(`{"a":`)); err == nil || errors.Is(err, ErrUnstorable) {
		t.Fatalf("malformed payload: %v", err)
	}
	if _, err := EncodePayload([]byte(`{"a":"\u0000"}`)); !errors.Is(err, ErrUnstorable) {
		t.Fatalf("NUL payload: %v", err)
	}
}

func TestSanitizeText(t *testing.T) {
	cases := map[string]string{
		"ok":           "ok",
		"a\x00b":       "a\uFFFDb",
		"a\xff\xfeb":   "a\uFFFDb",
		"\xed\xa0\x80": "\uFFFD",
	}
	for in, want := range cases {
		if got := SanitizeText(in, 0); got != want {
			t.Errorf("SanitizeText(%q) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("é", 100) // 200 bytes
	got := SanitizeText(long, 51)
	if !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || len(got) > 51+len("…") || CheckText(got) != nil {
		t.Fatalf("SanitizeText(long, 51) = %q", got)
	}
}

func TestSanitizeJSON(t *testing.T) {
	in := []byte(`{"a\u0000":["x\u0000y","\ud800",1e400,2],"ok":"<"}`)
	out, changed, err := SanitizeJSON(in)
	if err != nil || !changed || CheckJSON(out) != nil {
		t.Fatalf("SanitizeJSON = %s %v %v", out, changed, err)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	arr, _ := v["a\uFFFD"].([]any)
	if len(arr) != 4 || arr[0] != "x\uFFFDy" || arr[1] != "\uFFFD" || arr[2] != "1e400" || arr[3] != 2.0 {
		t.Fatalf("sanitized %s", out)
	}
	same, changed, err := SanitizeJSON([]byte(`{"b":1,"a":2}`))
	if err != nil || changed || string(same) != `{"b":1,"a":2}` {
		t.Fatalf("a storable document changed: %s %v %v", same, changed, err)
	}
}

// FuzzStorableJSON: CheckJSON never panics on valid JSON, and whatever
// SanitizeJSON returns passes it.
func FuzzStorableJSON(f *testing.F) {
	for _, s := range []string{`{"a\u0000":["\ud800",1e400]}`, "\"\xff\"", `[[[[1e-400]]]]`, `{"":""}`, `"\\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if !json.Valid(doc) {
			return
		}
		_ = CheckJSON(doc)
		out, _, err := SanitizeJSON(doc)
		if err == nil && CheckJSON(out) != nil {
			t.Fatalf("SanitizeJSON(%q) = %q, still unstorable: %v", doc, out, CheckJSON(out))
		}
	})
}

// TestEventText: the bound holds on the encoded text, whatever it holds.
func TestEventText(t *testing.T) {
	for _, s := range []string{strings.Repeat("<", 5000), strings.Repeat("\x01", 5000), strings.Repeat("é\x00", 3000), "short <b>", ""} {
		got := EventText(s, 1000)
		enc, _ := json.Marshal(got)
		if len(enc) > 1000 || CheckText(got) != nil {
			t.Errorf("EventText(%.20q…) encodes to %d bytes: %.40q", s, len(enc), got)
		}
		if len(s) < 100 && got != SanitizeText(s, 0) {
			t.Errorf("a short text changed: %q → %q", s, got)
		}
	}
}
