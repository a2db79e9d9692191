// Package callback lets work that runs outside Ferry's workers report back:
// an async http job's receiver answers 202 Accepted, then calls the api's
// callback routes (heartbeat, progress, complete, fail) with the job-scoped
// token its request carried.
//
// A token is sealed (AES-256-GCM, platform/secretbox under FERRY_SECRET_KEY,
// which the api and every worker share) over the tenant, job, attempt,
// dispatch, lease and expiry it grants: the api opens and checks it without
// a database read, and it is useless for any other job, attempt or dispatch.
// Which dispatch may still report is kept in Postgres (Attempts), so late,
// repeated and conflicting reports change nothing.
package callback

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/ferryhq/ferry/platform/secretbox"
)

// Headers of an async http job's request.
const (
	// HeaderURL is the base of the job's callback routes:
	// <api>/v1/jobs/<id>/callback; append /heartbeat, /progress, /complete
	// or /fail.
	HeaderURL = "Ferry-Callback-Url"
	// HeaderToken is the bearer token of those routes.
	HeaderToken = "Ferry-Callback-Token"
	// HeaderLease is the lease in whole seconds: a receiver that holds the
	// job reports (heartbeat or progress) at least this often, or the
	// attempt is presumed lost (worker_lost) and dispatched again.
	HeaderLease = "Ferry-Callback-Lease"
)

// tokenPrefix tells a callback token apart from an API key at a glance
// (and in secret scanners).
const tokenPrefix = "fcb_"

// Errors of Open.
var (
	ErrInvalidToken = errors.New("callback: invalid token")
	ErrExpiredToken = errors.New("callback: token expired")
)

// Claims are what a token grants: reports on one dispatch of one attempt of
// one job of one tenant, until Expires.
type Claims struct {
	TenantID   string
	JobID      string
	Attempt    int
	DispatchID string
	// Lease is how long each report keeps the attempt held.
	Lease   time.Duration
	Expires time.Time
}

// wire is the sealed form of Claims: short names, a token travels in a header.
type wire struct {
	TenantID   string `json:"t"`
	JobID      string `json:"j"`
	Attempt    int    `json:"a"`
	DispatchID string `json:"d"`
	LeaseMS    int64  `json:"l"`
	Expires    int64  `json:"e"`
}

// tokenAD binds a sealed token to its purpose: no other value sealed with
// the same key (a signing secret, bound to its row) opens as a token.
var tokenAD = []byte("ferry/callback-token/v1")

// Mint seals c into a token.
func Mint(box *secretbox.Box, c Claims) string {
	plain, _ := json.Marshal(wire{c.TenantID, c.JobID, c.Attempt, c.DispatchID, c.Lease.Milliseconds(), c.Expires.Unix()})
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(box.Seal(plain, tokenAD))
}

// Open returns the claims of token: ErrInvalidToken when it was not minted
// with box's key (or was altered), ErrExpiredToken past its expiry.
func Open(box *secretbox.Box, token string, now time.Time) (Claims, error) {
	raw, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return Claims{}, ErrInvalidToken
	}
	sealed, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return Claims{}, ErrInvalidToken
	}
	plain, err := box.Open(sealed, tokenAD)
	if err != nil {
		return Claims{}, ErrInvalidToken
	}
	var w wire
	if json.Unmarshal(plain, &w) != nil || w.JobID == "" || w.TenantID == "" || w.Attempt < 1 || w.DispatchID == "" || w.LeaseMS <= 0 {
		return Claims{}, ErrInvalidToken
	}
	c := Claims{TenantID: w.TenantID, JobID: w.JobID, Attempt: w.Attempt, DispatchID: w.DispatchID,
		Lease: time.Duration(w.LeaseMS) * time.Millisecond, Expires: time.Unix(w.Expires, 0).UTC()}
	if !now.Before(c.Expires) {
		return c, ErrExpiredToken
	}
	return c, nil
}
