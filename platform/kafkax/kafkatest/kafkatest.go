// Package kafkatest starts embedded Kafka brokers secured like hosted Kafka
// (a TLS listener signed by a test CA, SASL users) for the tests of
// FERRY_KAFKA_TLS* and FERRY_KAFKA_SASL_*.
package kafkatest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/devstack"
)

// CA is a throw-away certificate authority.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate as a PEM file, for FERRY_KAFKA_TLS_CA_FILE.
	File string
}

// NewCA makes a CA named name and writes its certificate under t.TempDir().
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("kafkatest: CA: %v", err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{cert: cert, key: key, File: filepath.Join(t.TempDir(), "ca.pem")}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Issue signs a certificate for hosts (DNS names or IP addresses) usable
// for servers and clients, and returns it as a tls.Certificate and as PEM
// files (certificate, key).
func (ca *CA) Issue(t testing.TB, cn string, hosts ...string) (cert tls.Certificate, certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("kafkatest: issue %s: %v", cn, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, certFile, keyFile
}

// Pool is a cert pool of this CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Broker is a secured embedded broker.
type Broker struct {
	Addr string
	// CA signed the broker certificate ("localhost" and 127.0.0.1).
	CA *CA
}

// Options say how to secure a [Start]ed broker.
type Options struct {
	// TLS serves only TLS, with a certificate of a fresh CA.
	TLS bool
	// ClientCA, when set with TLS, requires client certificates it signed.
	ClientCA *CA
	// Users enables SASL with these users.
	Users []devstack.SASLUser
}

// Start starts an embedded single-broker cluster on a free port of
// 127.0.0.1, secured as o says, stopped when the test ends.
func Start(t testing.TB, o Options) *Broker {
	t.Helper()
	b := &Broker{}
	cfg := devstack.KafkaConfig{Addr: "127.0.0.1:0", SASL: o.Users}
	if o.TLS {
		b.CA = NewCA(t, "kafkatest broker CA")
		cert, _, _ := b.CA.Issue(t, "broker", "localhost", "127.0.0.1")
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if o.ClientCA != nil {
			cfg.TLS.ClientCAs = o.ClientCA.Pool()
			cfg.TLS.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	k, err := devstack.StartKafka(cfg)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := k.Stop(ctx); err != nil {
			t.Errorf("kafkatest: %v", err)
		}
	})
	b.Addr = k.Addr()
	return b
}

// WriteSecret writes a secret file (mode 0600) under t.TempDir().
func WriteSecret(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("kafkatest: key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
}
