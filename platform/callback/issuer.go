package callback

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/ferryhq/ferry/platform/secretbox"
)

// ErrNoCallbackURL is returned by Issue when the worker was not told where
// the api is (FERRY_CALLBACK_URL): an async job cannot be handed out.
var ErrNoCallbackURL = errors.New("callback: FERRY_CALLBACK_URL is not set on the worker: async http jobs need the api's URL their receivers call back")

// Grant is what a request of an async http job carries.
type Grant struct {
	// URL is the base of the job's callback routes.
	URL   string
	Token string
}

// Issuer grants callbacks to the dispatches of async http jobs (the worker
// side): it records the dispatch as the one that may report and mints its
// token.
type Issuer struct {
	Box      *secretbox.Box
	Attempts *Attempts
	// BaseURL is the api's URL as receivers reach it (FERRY_CALLBACK_URL).
	BaseURL string
	// TTL bounds how long an attempt may be held in all: its token expires
	// then (FERRY_HTTP_CALLBACK_TOKEN_TTL).
	TTL time.Duration
}

// Issue records c's dispatch (c.Expires is set from the TTL) as the one
// that may report for its job and returns its grant. ok is false when a
// later attempt holds the job already: the request must not be sent.
func (i *Issuer) Issue(ctx context.Context, c Claims, now time.Time) (g Grant, ok bool, err error) {
	if i.BaseURL == "" {
		return Grant{}, false, ErrNoCallbackURL
	}
	c.Expires = now.Add(i.TTL)
	if ok, err = i.Attempts.Hold(ctx, c, now); err != nil || !ok {
		return Grant{}, ok, err
	}
	return Grant{URL: JobURL(i.BaseURL, c.JobID), Token: Mint(i.Box, c)}, true, nil
}

// Settle ends c's dispatch as reported by the worker itself.
func (i *Issuer) Settle(ctx context.Context, c Claims, now time.Time) error {
	return i.Attempts.Settle(ctx, c, now)
}

// JobURL is the base of job id's callback routes under the api at base.
func JobURL(base, id string) string {
	return strings.TrimRight(base, "/") + "/v1/jobs/" + url.PathEscape(id) + "/callback"
}
