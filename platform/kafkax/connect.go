package kafkax

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CheckConnection makes sure cl can reach and authenticate to the brokers
// before a service starts, so a wrong password or an untrusted certificate
// is one clear startup error naming the setting to change rather than a
// client that retries forever in the background. Unreachable brokers are
// retried until timeout (they may still be starting); authentication and
// TLS failures are returned at once, as retrying cannot fix them.
func CheckConnection(ctx context.Context, cl *kgo.Client, cfg Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	closed := 0
	for {
		err := cl.Ping(ctx)
		if err == nil {
			return nil
		}
		hint := fatalHint(err, cfg)
		// A broker that accepts the connection and closes it before
		// answering, again and again, is not starting up: it rejects
		// what Ferry sends (a password, plaintext, TLS). Kafka answers
		// SASL_AUTHENTICATION_FAILED first; some brokers only close.
		if closed = closedCount(closed, err); hint == "" && closed >= closedLimit {
			hint = closedHint(cfg)
		}
		if hint != "" {
			return fmt.Errorf("kafka %s: %s: %w", strings.Join(cfg.Brokers, ","), hint, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka %s: no broker answered within %s (check FERRY_KAFKA_BROKERS; "+
				"if the brokers require TLS or SASL, set FERRY_KAFKA_TLS and FERRY_KAFKA_SASL_MECHANISM): %w",
				strings.Join(cfg.Brokers, ","), timeout, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// fatalHint says which setting to change for an error that retrying
// cannot fix, "" for any other error.
func fatalHint(err error, cfg Config) string {
	sec := cfg.Security
	var (
		unknownCA *x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		header    tls.RecordHeaderError
		op        *net.OpError
		secret    *secretError
	)
	switch {
	case errors.As(err, &secret):
		return "cannot read a SASL secret"
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Sprintf("SASL %s authentication as %q failed: check FERRY_KAFKA_SASL_USERNAME and FERRY_KAFKA_SASL_PASSWORD (or FERRY_KAFKA_SASL_PASSWORD_FILE)",
			sec.SASLMechanism, sec.SASLUsername)
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return fmt.Sprintf("the brokers do not accept FERRY_KAFKA_SASL_MECHANISM=%s", sec.SASLMechanism)
	case errors.As(err, &hostname):
		return "the broker certificate does not name this host: set FERRY_KAFKA_TLS_SERVER_NAME to the name it carries, or connect by that name in FERRY_KAFKA_BROKERS"
	case errors.As(err, &unknownCA), errors.As(err, &invalid), errors.As(err, &verify):
		return "the broker certificate is not trusted: set FERRY_KAFKA_TLS_CA_FILE to the CA that signed it"
	case errors.As(err, &header):
		return "the broker did not answer TLS on this port: use the brokers' TLS listener, or unset FERRY_KAFKA_TLS for a plaintext one"
	case errors.As(err, &op) && op.Op == "remote error":
		return "the broker refused the TLS handshake: check FERRY_KAFKA_TLS_CERT_FILE and FERRY_KAFKA_TLS_KEY_FILE (a client certificate it trusts)"
	}
	return ""
}

// closedLimit is how many connections in a row a broker may close before
// answering before CheckConnection gives up on it.
const closedLimit = 3

// closedCount returns the number of consecutive pings that ended with the
// broker closing the connection, err being the latest.
func closedCount(prev int, err error) int {
	var first *kgo.ErrFirstReadEOF
	if errors.As(err, &first) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return prev + 1
	}
	return 0
}

// closedHint says which settings to check when the brokers keep closing
// connections before answering.
func closedHint(cfg Config) string {
	sec := cfg.Security
	switch {
	case sec.SASLMechanism != "":
		return fmt.Sprintf("the brokers closed every connection while authenticating with SASL %s as %q: check FERRY_KAFKA_SASL_USERNAME and FERRY_KAFKA_SASL_PASSWORD (or FERRY_KAFKA_SASL_PASSWORD_FILE), FERRY_KAFKA_SASL_MECHANISM, and FERRY_KAFKA_TLS for a TLS listener",
			sec.SASLMechanism, sec.SASLUsername)
	case sec.TLS:
		return "the brokers closed every TLS connection before answering: do they require SASL (FERRY_KAFKA_SASL_MECHANISM), or is this a plaintext listener (unset FERRY_KAFKA_TLS)?"
	default:
		return "the brokers closed every connection before answering: do they require TLS (FERRY_KAFKA_TLS=true) or SASL (FERRY_KAFKA_SASL_MECHANISM)?"
	}
}

// secretError is a SASL password or token file that cannot be read: a
// configuration error, never retried.
type secretError struct{ err error }

func (e *secretError) Error() string { return e.err.Error() }
func (e *secretError) Unwrap() error { return e.err }
