package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Deployment environments (FERRY_ENV).
const (
	EnvDevelopment = "development"
	EnvProduction  = "production"
)

// SASL mechanisms FERRY_KAFKA_SASL_MECHANISM accepts.
var kafkaSASLMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"}

// Secret is a credential read from the environment. It prints, logs and
// marshals as "[redacted]" so that a configuration struct dumped in a log
// line or an error never carries it; Reveal returns the value.
type Secret string

// Reveal returns the secret itself, for the one place that sends it.
func (s Secret) Reveal() string { return string(s) }

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString redacts the secret for %#v.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// MarshalText redacts the secret in JSON and slog output.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// KafkaSecurity is how Ferry authenticates to and encrypts its connections
// to Kafka. Secrets given as files are named here and read when a connection
// authenticates, so a rotated file is picked up without a restart.
type KafkaSecurity struct {
	// TLS encrypts every broker connection. Implied by any TLS_* file.
	TLS bool
	// TLSCAFile is a PEM bundle of the CAs that sign the brokers'
	// certificates; empty uses the system roots.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a client certificate and its key (mTLS).
	TLSCertFile, TLSKeyFile string
	// TLSServerName overrides the name checked in the broker certificates.
	TLSServerName string
	// TLSInsecureSkipVerify accepts any broker certificate. Never in production.
	TLSInsecureSkipVerify bool
	// SASLMechanism is "", PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER.
	SASLMechanism string
	SASLUsername  string
	// SASLPassword or SASLPasswordFile (one of them) is the password.
	SASLPassword     Secret
	SASLPasswordFile string
	// SASLTokenFile holds the OAUTHBEARER token, re-read at each authentication.
	SASLTokenFile string
}

// LoadKafkaSecurity reads the FERRY_KAFKA_TLS* and FERRY_KAFKA_SASL_* variables
// (the services through LoadCommon, the bench probe directly).
func LoadKafkaSecurity(l *Loader) KafkaSecurity {
	s := KafkaSecurity{
		TLS:                   kafkaBool(l, "FERRY_KAFKA_TLS"),
		TLSCAFile:             l.String("FERRY_KAFKA_TLS_CA_FILE"),
		TLSCertFile:           l.String("FERRY_KAFKA_TLS_CERT_FILE"),
		TLSKeyFile:            l.String("FERRY_KAFKA_TLS_KEY_FILE"),
		TLSServerName:         l.String("FERRY_KAFKA_TLS_SERVER_NAME"),
		TLSInsecureSkipVerify: kafkaBool(l, "FERRY_KAFKA_TLS_INSECURE_SKIP_VERIFY"),
		SASLMechanism:         strings.ToUpper(l.String("FERRY_KAFKA_SASL_MECHANISM")),
		SASLUsername:          l.String("FERRY_KAFKA_SASL_USERNAME"),
		SASLPassword:          Secret(l.String("FERRY_KAFKA_SASL_PASSWORD")),
		SASLPasswordFile:      l.String("FERRY_KAFKA_SASL_PASSWORD_FILE"),
		SASLTokenFile:         l.String("FERRY_KAFKA_SASL_TOKEN_FILE"),
	}
	if s.TLSCAFile != "" || s.TLSCertFile != "" || s.TLSServerName != "" || s.TLSInsecureSkipVerify {
		s.TLS = true
	}
	return s
}

// kafkaBool reads name as true/false (1/0, yes/no, on/off), recording an
// error in l for anything else.
func kafkaBool(l *Loader, name string) bool {
	switch s := strings.ToLower(l.Raw(name)); s {
	case "true", "1", "yes", "on":
		return true
	case "false", "0", "no", "off", "":
		return false
	default:
		l.errs = append(l.errs, fmt.Errorf("%s=%q: use true or false", name, s))
		return false
	}
}

// Validate reports combinations that cannot authenticate, naming the
// variable to change.
func (s KafkaSecurity) Validate() error {
	var errs []error
	if (s.TLSCertFile == "") != (s.TLSKeyFile == "") {
		errs = append(errs, errors.New("FERRY_KAFKA_TLS_CERT_FILE and FERRY_KAFKA_TLS_KEY_FILE go together: set both for a client certificate, or neither"))
	}
	mech := s.SASLMechanism
	switch {
	case mech == "":
		if s.SASLUsername != "" || s.SASLPassword != "" || s.SASLPasswordFile != "" || s.SASLTokenFile != "" {
			errs = append(errs, errors.New("FERRY_KAFKA_SASL_USERNAME/PASSWORD/TOKEN_FILE are set but FERRY_KAFKA_SASL_MECHANISM is empty: set it to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"))
		}
	case mech == "OAUTHBEARER":
		if s.SASLTokenFile == "" {
			errs = append(errs, errors.New("FERRY_KAFKA_SASL_MECHANISM=OAUTHBEARER needs FERRY_KAFKA_SASL_TOKEN_FILE"))
		}
	case !slices.Contains(kafkaSASLMechanisms, mech):
		errs = append(errs, fmt.Errorf("FERRY_KAFKA_SASL_MECHANISM=%q: use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", mech))
	default:
		if s.SASLUsername == "" {
			errs = append(errs, fmt.Errorf("FERRY_KAFKA_SASL_MECHANISM=%s needs FERRY_KAFKA_SASL_USERNAME", mech))
		}
		if (s.SASLPassword == "") == (s.SASLPasswordFile == "") {
			errs = append(errs, fmt.Errorf("FERRY_KAFKA_SASL_MECHANISM=%s needs exactly one of FERRY_KAFKA_SASL_PASSWORD and FERRY_KAFKA_SASL_PASSWORD_FILE", mech))
		}
	}
	return errors.Join(errs...)
}

// validateTopicDurability reports topic settings that cannot be created or
// are not a known environment.
func (c Common) validateTopicDurability() error {
	var errs []error
	if c.Env != EnvDevelopment && c.Env != EnvProduction {
		errs = append(errs, fmt.Errorf("FERRY_ENV=%q: use development or production", c.Env))
	}
	if c.TopicReplication < 1 {
		errs = append(errs, errors.New("FERRY_TOPIC_REPLICATION must be ≥ 1"))
	}
	if c.TopicMinInsync < 1 {
		errs = append(errs, errors.New("FERRY_TOPIC_MIN_INSYNC must be ≥ 1"))
	}
	return errors.Join(errs...)
}
