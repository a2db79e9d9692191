// Package redisx opens go-redis clients: to one server named by a URL, or
// to the master a set of Redis Sentinels point at, followed through
// failovers; with ACL credentials and TLS when configured.
package redisx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/platform/config"
)

// minPoolSize leaves room in the pool for pipelined hot paths and blocking
// waits, which share it.
const minPoolSize = 64

// Open parses url (redis://host:port/db), connects and pings.
func Open(ctx context.Context, url string) (*redis.Client, error) {
	return Connect(ctx, url, config.RedisOptions{})
}

// Connect opens a client with the settings of url and o and pings it, so a
// wrong address, password or certificate stops a start with a message
// naming what to change. With o.SentinelAddrs the client asks the sentinels
// for the master and reconnects to the new one after a failover; url then
// only supplies the database number and credentials, and may be empty.
func Connect(ctx context.Context, url string, o config.RedisOptions) (*redis.Client, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	base, err := parseURL(url, o)
	if err != nil {
		return nil, err
	}
	tc, err := tlsConfig(base.TLSConfig, o)
	if err != nil {
		return nil, err
	}
	var cl *redis.Client
	where := base.Addr
	if o.Sentinel() {
		fo, err := failoverOptions(base, tc, o)
		if err != nil {
			return nil, err
		}
		cl = redis.NewFailoverClient(fo)
		where = fmt.Sprintf("master %q of sentinels %s", o.SentinelMaster, strings.Join(o.SentinelAddrs, ","))
	} else {
		base.TLSConfig = tc
		base.CredentialsProviderContext = credentials(base, o)
		base.PoolSize = max(base.PoolSize, minPoolSize)
		cl = redis.NewClient(base)
	}
	if err := cl.Ping(ctx).Err(); err != nil {
		cl.Close()
		return nil, pingError(where, err)
	}
	return cl, nil
}

// parseURL reads url's address, database and credentials; an empty url is
// allowed with Sentinel (database 0, credentials from o).
func parseURL(url string, o config.RedisOptions) (*redis.Options, error) {
	if url == "" {
		if o.Sentinel() {
			return &redis.Options{}, nil
		}
		return nil, errors.New("redisx: FERRY_REDIS_URL is empty: set it (redis://host:6379/0), or FERRY_REDIS_SENTINEL_ADDRS and FERRY_REDIS_SENTINEL_MASTER")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		// The URL may carry a password: never echo it.
		return nil, fmt.Errorf("redisx: FERRY_REDIS_URL is not a redis:// or rediss:// URL: %w", redactURLError(err, url))
	}
	return opt, nil
}

// redactURLError drops url (and so any password in it) from err's text.
func redactURLError(err error, url string) error {
	msg := strings.ReplaceAll(err.Error(), url, "<url>")
	return errors.New(msg)
}

// failoverOptions are the Sentinel client options: the sentinels and master
// of o, the database and credentials of base.
func failoverOptions(base *redis.Options, tc *tls.Config, o config.RedisOptions) (*redis.FailoverOptions, error) {
	sentinelPass := o.SentinelPassword.Reveal()
	if o.SentinelPasswordFile != "" {
		p, err := readSecretFile("FERRY_REDIS_SENTINEL_PASSWORD_FILE", o.SentinelPasswordFile)
		if err != nil {
			return nil, err
		}
		sentinelPass = p
	}
	return &redis.FailoverOptions{
		MasterName:                 o.SentinelMaster,
		SentinelAddrs:              o.SentinelAddrs,
		SentinelPassword:           sentinelPass,
		DB:                         base.DB,
		TLSConfig:                  tc,
		CredentialsProviderContext: credentials(base, o),
		PoolSize:                   max(base.PoolSize, minPoolSize),
	}, nil
}

// credentials returns the ACL user and password of each new connection:
// o's, else the URL's. A password file is read at each connection so a
// rotated secret needs no restart.
func credentials(base *redis.Options, o config.RedisOptions) func(context.Context) (string, string, error) {
	user, pass := base.Username, base.Password
	if o.Username != "" {
		user = o.Username
	}
	if o.Password != "" {
		pass = o.Password.Reveal()
	}
	return func(context.Context) (string, string, error) {
		if o.PasswordFile == "" {
			return user, pass, nil
		}
		p, err := readSecretFile("FERRY_REDIS_PASSWORD_FILE", o.PasswordFile)
		return user, p, err
	}
}

// tlsConfig returns the client TLS configuration: nil without TLS, else
// fromURL (a rediss:// URL's) or a new one, with o's CA roots, client
// certificate and server name. An empty server name lets the dialler use
// the host it dials, which after a failover is the new master's.
func tlsConfig(fromURL *tls.Config, o config.RedisOptions) (*tls.Config, error) {
	implied := o.TLSCAFile != "" || o.TLSCertFile != "" || o.TLSServerName != ""
	if !o.TLS && !implied && fromURL == nil {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if fromURL != nil {
		tc = fromURL.Clone()
	}
	if o.Sentinel() || o.TLSServerName != "" {
		// The URL's host is not the one dialled with Sentinel.
		tc.ServerName = o.TLSServerName
	}
	if o.TLSCAFile != "" {
		pem, err := os.ReadFile(o.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("redisx: FERRY_REDIS_TLS_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redisx: FERRY_REDIS_TLS_CA_FILE %s holds no PEM certificate", o.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	if o.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("redisx: FERRY_REDIS_TLS_CERT_FILE/FERRY_REDIS_TLS_KEY_FILE: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// readSecretFile reads a one-line secret; errors name the variable and the
// path, never the content.
func readSecretFile(name, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("redisx: %s: %w", name, err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("redisx: %s %s is empty", name, path)
	}
	return v, nil
}

// pingError explains a failed first ping: authentication and TLS failures
// name the variables to check, since retrying cannot fix them.
func pingError(where string, err error) error {
	msg := err.Error()
	var hint string
	switch {
	case strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "NOAUTH"), strings.Contains(msg, "invalid username-password"):
		hint = "authentication failed: check FERRY_REDIS_USERNAME and FERRY_REDIS_PASSWORD(_FILE) (or the credentials in FERRY_REDIS_URL)"
	case strings.Contains(msg, "NOPERM"):
		hint = "the ACL user lacks a permission Ferry needs: grant it +@all on ~* (or at least the commands and keys Ferry uses)"
	case strings.Contains(msg, "certificate"), strings.Contains(msg, "tls:"):
		hint = "TLS failed: check FERRY_REDIS_TLS_CA_FILE and FERRY_REDIS_TLS_SERVER_NAME"
	case strings.Contains(msg, "sentinels"):
		hint = "no sentinel knows the master: check FERRY_REDIS_SENTINEL_ADDRS and FERRY_REDIS_SENTINEL_MASTER (and FERRY_REDIS_SENTINEL_PASSWORD)"
	default:
		return fmt.Errorf("redisx: ping %s: %w", where, err)
	}
	return fmt.Errorf("redisx: %s: %s: %w", where, hint, err)
}
