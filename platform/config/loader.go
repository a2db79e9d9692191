package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// Loader reads declared variables through a lookup function, applying the
// declared default when a variable is unset or empty, and collects every
// parse error so one run reports all bad settings at once.
type Loader struct {
	lookup    func(string) (string, bool)
	overrides map[string]string
	errs      []error
}

// NewLoader returns a Loader over lookup; nil means os.LookupEnv.
func NewLoader(lookup func(string) (string, bool)) *Loader {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	return &Loader{lookup: lookup, overrides: map[string]string{}}
}

// SetDefault replaces the declared default of name for this loader; `ferry
// dev` uses it for the values it generates (ports, keys).
func (l *Loader) SetDefault(name, value string) {
	l.mustKnow(name)
	l.overrides[name] = value
}

func (l *Loader) mustKnow(name string) Var {
	v, ok := Lookup(name)
	if !ok {
		// A programming error: every variable must be declared in Vars.
		panic("config: undeclared environment variable " + name)
	}
	return v
}

// Raw returns the value of name, or its default.
func (l *Loader) Raw(name string) string {
	v := l.mustKnow(name)
	if s, ok := l.lookup(name); ok && strings.TrimSpace(s) != "" {
		return strings.TrimSpace(s)
	}
	if d, ok := l.overrides[name]; ok {
		return d
	}
	return v.Default
}

// IsSet reports whether name is set (non-empty) in the environment.
func (l *Loader) IsSet(name string) bool {
	l.mustKnow(name)
	s, ok := l.lookup(name)
	return ok && strings.TrimSpace(s) != ""
}

// String returns the value of name.
func (l *Loader) String(name string) string { return l.Raw(name) }

// List returns the comma-separated values of name, trimmed, empty ones dropped.
func (l *Loader) List(name string) []string {
	var out []string
	for _, s := range strings.Split(l.Raw(name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Bool returns name as true/false (1/0, yes/no, on/off); anything else is
// an error in Err.
func (l *Loader) Bool(name string) bool { return kafkaBool(l, name) }

// Int returns name as an integer.
func (l *Loader) Int(name string) int {
	s := l.Raw(name)
	n, err := strconv.Atoi(s)
	if err != nil {
		l.errs = append(l.errs, fmt.Errorf("%s=%q: not an integer", name, s))
	}
	return n
}

// IntMap returns name as comma-separated key=integer pairs
// ("email.send=10,report=2"); nil when unset.
func (l *Loader) IntMap(name string) map[string]int {
	items := l.List(name)
	if len(items) == 0 {
		return nil
	}
	out := make(map[string]int, len(items))
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if k = strings.TrimSpace(k); !ok || k == "" || err != nil {
			l.errs = append(l.errs, fmt.Errorf("%s: %q: want key=integer", name, it))
			continue
		}
		out[k] = n
	}
	return out
}

// Duration returns name as a Go duration ("500ms", "2s").
func (l *Loader) Duration(name string) time.Duration {
	s := l.Raw(name)
	d, err := time.ParseDuration(s)
	if err != nil {
		l.errs = append(l.errs, fmt.Errorf("%s=%q: not a duration such as 500ms or 2s", name, s))
	}
	return d
}

// Prefixes returns name as comma-separated CIDRs (a bare address is a /32 or /128).
func (l *Loader) Prefixes(name string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range l.List(name) {
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				l.errs = append(l.errs, fmt.Errorf("%s: %q is not an address or CIDR", name, s))
				continue
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			l.errs = append(l.errs, fmt.Errorf("%s: %q is not a CIDR", name, s))
			continue
		}
		out = append(out, p.Masked())
	}
	return out
}

// Err returns every error met so far, joined.
func (l *Loader) Err() error { return errors.Join(l.errs...) }
