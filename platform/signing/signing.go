// Package signing implements the sender side of Standard Webhooks
// (https://www.standardwebhooks.com): secrets of the form whsec_<base64>,
// and the webhook-signature header "v1,<base64 HMAC-SHA256>" over
// "<webhook-id>.<webhook-timestamp>.<body>". The webhooks service signs
// its deliveries with it, and the worker's http handler its requests, with
// the tenant's secrets kept by [Secrets].
package signing

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SecretPrefix marks a Standard Webhooks signing secret.
const SecretPrefix = "whsec_"

// Header names of Standard Webhooks.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// NewSecret returns a fresh secret: whsec_ and the base64 of 32 random bytes.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// ErrBadSecret is returned for a secret that is not whsec_<base64>.
var ErrBadSecret = errors.New("signing: secret must be whsec_ followed by base64")

// Key returns the HMAC key of a secret: the base64-decoded bytes after whsec_.
func Key(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, ErrBadSecret
	}
	k, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(k) == 0 {
		return nil, ErrBadSecret
	}
	return k, nil
}

// Sign returns the signature of one secret, "v1,<base64>".
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(ts.Unix(), 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Header returns the webhook-signature value: one signature per key,
// space-separated (receivers accept the message if any one verifies), so a
// rotated secret keeps working during its grace period.
func Header(keys [][]byte, id string, ts time.Time, body []byte) string {
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		sigs = append(sigs, Sign(k, id, ts, body))
	}
	return strings.Join(sigs, " ")
}

// SetHeaders sets the three Standard Webhooks headers of a message on h:
// its id, ts in unix seconds and the signatures of body by every key.
func SetHeaders(h http.Header, keys [][]byte, id string, ts time.Time, body []byte) {
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Header(keys, id, ts, body))
}
