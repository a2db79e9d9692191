// Command verify checks the Standard Webhooks signature of a request Ferry's
// http handler sent (docs/http-jobs.md). It reads the secret from
// FERRY_SIGNING_SECRET, the headers from WEBHOOK_ID, WEBHOOK_TIMESTAMP and
// WEBHOOK_SIGNATURE, the raw body from stdin, and prints "verified" or
// fails. In a server, call verify with r.Header and the body you read.
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// BEGIN verify

// verify checks that a request comes from Ferry: its timestamp is within
// 5 minutes of now (a replayed request is refused), and one of the
// signatures is the HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>"
// under the secret, compared in constant time.
func verify(secret string, h http.Header, body []byte, now time.Time) error {
	const tolerance = 5 * time.Minute
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return errors.New("the secret is not whsec_<base64>")
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("bad timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("timestamp outside the tolerance")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		version, b64, _ := strings.Cut(sig, ",")
		got, err := base64.StdEncoding.DecodeString(b64)
		if version == "v1" && err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no valid signature")
}

// END verify

func main() {
	body, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	h := http.Header{}
	h.Set("webhook-id", os.Getenv("WEBHOOK_ID"))
	h.Set("webhook-timestamp", os.Getenv("WEBHOOK_TIMESTAMP"))
	h.Set("webhook-signature", os.Getenv("WEBHOOK_SIGNATURE"))
	if err := verify(os.Getenv("FERRY_SIGNING_SECRET"), h, body, time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("verified")
}
