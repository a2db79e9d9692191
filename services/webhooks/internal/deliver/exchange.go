package deliver

import (
	"net/http"
	"slices"
	"strings"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/signing"
)

// Bounds of what the delivery log keeps of an attempt: the start of the
// response body, and a bounded set of short header values, so a receiver
// cannot make the log grow without bound.
const (
	maxLoggedBody        = 4 << 10
	maxLoggedHeaders     = 32
	maxLoggedHeaderValue = 256
)

// redacted stands for a header value the log does not keep.
const redacted = "[redacted]"

// secretWords mark header names that may carry a credential: a receiver's
// answer can set cookies or echo tokens, which the log must not keep.
var secretWords = []string{"authorization", "cookie", "token", "secret", "key", "auth", "session", "password", "credential", "signature"}

// secretHeader says whether the value of header name is kept out of the log.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	return slices.ContainsFunc(secretWords, func(w string) bool { return strings.Contains(n, w) })
}

// loggedHeaders is h as the delivery log keeps it: one value per name
// (repeats joined by ", "), each at most maxLoggedHeaderValue bytes of
// storable text, credentials redacted, at most maxLoggedHeaders names (the
// first in sorted order).
func loggedHeaders(h http.Header) map[string]string {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make(map[string]string, min(len(names), maxLoggedHeaders))
	for _, name := range names[:min(len(names), maxLoggedHeaders)] {
		key := schema.SanitizeText(name, maxLoggedHeaderValue)
		switch {
		case strings.EqualFold(name, signing.HeaderSignature):
			out[key] = redactSignatures(h.Get(name))
		case secretHeader(name):
			out[key] = redacted
		default:
			out[key] = schema.SanitizeText(strings.Join(h.Values(name), ", "), maxLoggedHeaderValue)
		}
	}
	return out
}

// redactSignatures keeps the scheme of each webhook-signature ("v1,…"), so
// the log shows how many secrets signed (two during a rotation's grace),
// but not the signatures themselves.
func redactSignatures(v string) string {
	sigs := strings.Fields(v)
	for i, s := range sigs {
		scheme, _, _ := strings.Cut(s, ",")
		sigs[i] = scheme + "," + redacted
	}
	return strings.Join(sigs, " ")
}
