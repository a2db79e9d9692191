package jobs

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestConcurrency: a concurrency key is carried with its limit (1 when
// absent); a bad key or limit is a field error.
func TestConcurrency(t *testing.T) {
	now := time.Now()
	two := 2
	a, err := Validate(Request{Type: "x", Concurrency: &ConcurrencyRequest{Key: "customer-42", Limit: &two}}, now, Limits{})
	if err != nil || a.Spec.Concurrency == nil || a.Spec.Concurrency.Key != "customer-42" || a.Spec.Concurrency.Limit != 2 {
		t.Fatalf("keyed: %+v %v", a.Spec.Concurrency, err)
	}
	a, err = Validate(Request{Type: "x", Concurrency: &ConcurrencyRequest{Key: "user@example.com"}}, now, Limits{})
	if err != nil || a.Spec.Concurrency.Limit != DefaultConcurrencyLimit {
		t.Fatalf("default limit: %+v %v", a.Spec.Concurrency, err)
	}
	if a, err := Validate(Request{Type: "x"}, now, Limits{}); err != nil || a.Spec.Concurrency != nil {
		t.Fatalf("no key: %+v %v", a.Spec.Concurrency, err)
	}
	zero, big := 0, MaxConcurrencyLimit+1
	for name, c := range map[string]*ConcurrencyRequest{
		"concurrency.key":    {Key: ""},
		"concurrency.key ":   {Key: "a\nb"},
		"concurrency.key  ":  {Key: strings.Repeat("k", 129)},
		"concurrency.limit":  {Key: "k", Limit: &zero},
		" concurrency.limit": {Key: "k", Limit: &big},
	} {
		_, err := Validate(Request{Type: "x", Concurrency: c}, now, Limits{})
		var inv *Invalid
		if !errors.As(err, &inv) || inv.Fields[strings.TrimSpace(name)] == "" {
			t.Errorf("%+v: %v, want a field error on %s", c, err, strings.TrimSpace(name))
		}
	}
	// The key is part of what the request means.
	if Hash(Request{Type: "x", Concurrency: &ConcurrencyRequest{Key: "a"}}) == Hash(Request{Type: "x", Concurrency: &ConcurrencyRequest{Key: "b"}}) {
		t.Error("requests with different concurrency keys hash alike")
	}
}
