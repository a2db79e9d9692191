package config

import (
	"errors"
)

// RedisOptions are how Ferry reaches Redis beyond FERRY_REDIS_URL: ACL
// credentials, TLS and Sentinel. A password in the URL keeps working; the
// settings here override it. Secrets given as files are named here and read
// when a connection authenticates, so a rotated file needs no restart.
type RedisOptions struct {
	// Username is the ACL user; empty uses the URL's, or "default".
	Username string
	// Password or PasswordFile (at most one) is the ACL password.
	Password     Secret
	PasswordFile string
	// TLS encrypts every connection (also implied by rediss:// and by any
	// TLS_* setting).
	TLS bool
	// TLSCAFile is a PEM bundle of the CAs that sign the servers'
	// certificates; empty uses the system roots.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a client certificate and its key.
	TLSCertFile, TLSKeyFile string
	// TLSServerName overrides the name checked in server certificates
	// (default: the host dialled, which after a Sentinel failover is the
	// new master's announced address).
	TLSServerName string
	// SentinelAddrs, when set, switch to Sentinel: the master named
	// SentinelMaster is asked of these sentinels and followed on failover.
	SentinelAddrs  []string
	SentinelMaster string
	// SentinelPassword or SentinelPasswordFile authenticates to the
	// sentinels themselves (their requirepass).
	SentinelPassword     Secret
	SentinelPasswordFile string
}

// LoadRedisOptions reads the FERRY_REDIS_* variables besides the URL.
func LoadRedisOptions(l *Loader) RedisOptions {
	o := RedisOptions{
		Username:             l.String("FERRY_REDIS_USERNAME"),
		Password:             Secret(l.String("FERRY_REDIS_PASSWORD")),
		PasswordFile:         l.String("FERRY_REDIS_PASSWORD_FILE"),
		TLS:                  kafkaBool(l, "FERRY_REDIS_TLS"),
		TLSCAFile:            l.String("FERRY_REDIS_TLS_CA_FILE"),
		TLSCertFile:          l.String("FERRY_REDIS_TLS_CERT_FILE"),
		TLSKeyFile:           l.String("FERRY_REDIS_TLS_KEY_FILE"),
		TLSServerName:        l.String("FERRY_REDIS_TLS_SERVER_NAME"),
		SentinelAddrs:        l.List("FERRY_REDIS_SENTINEL_ADDRS"),
		SentinelMaster:       l.String("FERRY_REDIS_SENTINEL_MASTER"),
		SentinelPassword:     Secret(l.String("FERRY_REDIS_SENTINEL_PASSWORD")),
		SentinelPasswordFile: l.String("FERRY_REDIS_SENTINEL_PASSWORD_FILE"),
	}
	if o.TLSCAFile != "" || o.TLSCertFile != "" || o.TLSServerName != "" {
		o.TLS = true
	}
	return o
}

// Sentinel reports whether Redis is reached through Sentinel.
func (o RedisOptions) Sentinel() bool { return len(o.SentinelAddrs) > 0 }

// Validate reports combinations that cannot connect, naming the variable
// to change.
func (o RedisOptions) Validate() error {
	var errs []error
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		errs = append(errs, errors.New("FERRY_REDIS_TLS_CERT_FILE and FERRY_REDIS_TLS_KEY_FILE go together: set both for a client certificate, or neither"))
	}
	if o.Password != "" && o.PasswordFile != "" {
		errs = append(errs, errors.New("set at most one of FERRY_REDIS_PASSWORD and FERRY_REDIS_PASSWORD_FILE"))
	}
	if o.SentinelPassword != "" && o.SentinelPasswordFile != "" {
		errs = append(errs, errors.New("set at most one of FERRY_REDIS_SENTINEL_PASSWORD and FERRY_REDIS_SENTINEL_PASSWORD_FILE"))
	}
	if o.Sentinel() != (o.SentinelMaster != "") {
		errs = append(errs, errors.New("FERRY_REDIS_SENTINEL_ADDRS and FERRY_REDIS_SENTINEL_MASTER go together: set both to use Sentinel, or neither"))
	}
	return errors.Join(errs...)
}
