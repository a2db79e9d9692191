package kafkax

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ferryhq/ferry/platform/config"
)

// securityOpts returns the kgo options that encrypt (TLS) and authenticate
// (SASL) every connection of a client, so every client Ferry creates —
// producers, consumers, admin — talks to secured Kafka the same way.
func securityOpts(s config.KafkaSecurity) ([]kgo.Opt, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if s.TLS {
		tc, err := TLSConfig(s)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if m := saslMechanism(s); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// TLSConfig returns the client TLS configuration of s: the CA file's roots
// (or the system's), the client certificate, the server name override. kgo
// fills in each broker's host as the server name when it is empty.
func TLSConfig(s config.KafkaSecurity) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         s.TLSServerName,
		InsecureSkipVerify: s.TLSInsecureSkipVerify, //nolint:gosec // only when explicitly configured, and logged loudly
	}
	if s.TLSCAFile != "" {
		pem, err := os.ReadFile(s.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("kafkax: FERRY_KAFKA_TLS_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafkax: FERRY_KAFKA_TLS_CA_FILE %s holds no PEM certificate", s.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	if s.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafkax: FERRY_KAFKA_TLS_CERT_FILE/FERRY_KAFKA_TLS_KEY_FILE: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// saslMechanism returns the SASL mechanism of s, nil for none. Passwords
// and tokens given as files are read at each authentication, so a rotated
// secret needs no restart; a read error fails that authentication.
func saslMechanism(s config.KafkaSecurity) sasl.Mechanism {
	switch s.SASLMechanism {
	case "PLAIN":
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			pass, err := password(s)
			return plain.Auth{User: s.SASLUsername, Pass: pass}, err
		})
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		auth := func(context.Context) (scram.Auth, error) {
			pass, err := password(s)
			return scram.Auth{User: s.SASLUsername, Pass: pass}, err
		}
		if s.SASLMechanism == "SCRAM-SHA-256" {
			return scram.Sha256(auth)
		}
		return scram.Sha512(auth)
	case "OAUTHBEARER":
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := readSecretFile("FERRY_KAFKA_SASL_TOKEN_FILE", s.SASLTokenFile)
			return oauth.Auth{Token: tok}, err
		})
	}
	return nil
}

// password returns the SASL password from the environment or its file.
func password(s config.KafkaSecurity) (string, error) {
	if s.SASLPasswordFile == "" {
		return s.SASLPassword.Reveal(), nil
	}
	return readSecretFile("FERRY_KAFKA_SASL_PASSWORD_FILE", s.SASLPasswordFile)
}

// readSecretFile reads a one-line secret; errors name the variable and the
// path, never the content.
func readSecretFile(name, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", &secretError{fmt.Errorf("kafkax: %s: %w", name, err)}
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", &secretError{fmt.Errorf("kafkax: %s %s is empty", name, path)}
	}
	return v, nil
}
