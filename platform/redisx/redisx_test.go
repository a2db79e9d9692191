package redisx_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/platform/redisx"
)

// server is a redis-server process a test started on a free loopback port.
type server struct {
	cmd  *exec.Cmd
	port int
	log  string
}

// startServer runs redis-server (or, with --sentinel among args, a
// sentinel) with a config file holding conf and args, waits until its port
// accepts connections and stops it by PID when the test ends. port is the
// port to listen on; 0 picks a free one for the plain-text port.
func startServer(t *testing.T, port int, conf string, args ...string) *server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed: run scripts/install-deps.sh")
	}
	if port == 0 {
		p, err := devstack.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		port = p
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "redis.conf")
	conf = fmt.Sprintf("bind 127.0.0.1\nport %d\ndir %s\nsave \"\"\nappendonly no\n%s\n", port, dir, conf)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &server{port: port, log: filepath.Join(dir, "redis.log")}
	s.cmd = exec.Command("redis-server", append([]string{file, "--logfile", s.log}, args...)...)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kill() })
	waitPort(t, s, port)
	return s
}

// waitPort waits until something accepts connections on port.
func waitPort(t *testing.T, s *server, port int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(s.log)
	t.Fatalf("redis-server on port %d did not start; log:\n%s", port, b)
}

// kill stops the process with SIGKILL, as a crash would.
func (s *server) kill() {
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Kill() //nolint:errcheck
		s.cmd.Wait()         //nolint:errcheck
	}
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *server) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSentinelFailover kills the master with SIGKILL: the client asks the
// sentinel for the promoted replica and keeps working, with what the master
// had replicated.
func TestSentinelFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	master := startServer(t, 0, "")
	replica := startServer(t, 0, fmt.Sprintf("replicaof 127.0.0.1 %d", master.port))
	sentinel := startServer(t, 0, fmt.Sprintf(`sentinel monitor ferrym 127.0.0.1 %d 1
sentinel down-after-milliseconds ferrym 500
sentinel failover-timeout ferrym 5000`, master.port), "--sentinel")

	waitReplicaLinked(ctx, t, replica)

	cl, err := redisx.Connect(ctx, "redis://ignored-with-sentinel:1/3", config.RedisOptions{
		SentinelAddrs: []string{sentinel.addr()}, SentinelMaster: "ferrym",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The write reaches the replica before the master dies.
	if n, err := cl.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas, %v", n, err)
	}
	if port := serverPort(ctx, t, cl); port != master.port {
		t.Fatalf("client talks to port %d, want the master's %d", port, master.port)
	}

	master.kill()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err = cl.Set(ctx, "after", "2", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(sentinel.log)
			t.Fatalf("no write succeeded after the master died: %v; sentinel log:\n%s", err, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if port := serverPort(ctx, t, cl); port != replica.port {
		t.Fatalf("after failover the client talks to port %d, want the promoted replica's %d", port, replica.port)
	}
	if v, err := cl.Get(ctx, "before").Result(); err != nil || v != "1" {
		t.Fatalf("GET before after failover = %q, %v", v, err)
	}
	if db := cl.Options().DB; db != 3 {
		t.Fatalf("database %d, want the URL's 3", db)
	}
}

// waitReplicaLinked waits until the replica finished its first sync with
// the master, so that WAIT can count it.
func waitReplicaLinked(ctx context.Context, t *testing.T, replica *server) {
	t.Helper()
	c := replica.client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica never linked to its master: %v\n%s", err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serverPort asks the server the client is connected to for its port.
func serverPort(ctx context.Context, t *testing.T, cl *redis.Client) int {
	t.Helper()
	cfg, err := cl.ConfigGet(ctx, "port").Result()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(cfg["port"])
	return p
}

// TestACL: a wrong password is a clear error at connect (naming the
// variables to check, never the password); the password from a file, from
// the environment, or in the URL connects.
func TestACL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := startServer(t, 0, "user default off\nuser ferry on >s3cret-pass ~* &* +@all")
	url := "redis://" + s.addr() + "/0"

	_, err := redisx.Connect(ctx, url, config.RedisOptions{Username: "ferry", Password: "wrong-guess"})
	if err == nil {
		t.Fatal("a wrong password connected")
	}
	for _, want := range []string{"authentication failed", "FERRY_REDIS_PASSWORD"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "wrong-guess") {
		t.Errorf("error %q carries the password", err)
	}
	if _, err := redisx.Connect(ctx, url, config.RedisOptions{}); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("no credentials: err = %v, want an authentication error", err)
	}

	file := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(file, []byte("s3cret-pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		url string
		o   config.RedisOptions
	}{
		"file":         {url, config.RedisOptions{Username: "ferry", PasswordFile: file}},
		"env":          {url, config.RedisOptions{Username: "ferry", Password: "s3cret-pass"}},
		"url":          {"redis://ferry:s3cret-pass@" + s.addr() + "/0", config.RedisOptions{}},
		"env over url": {"redis://ferry:stale@" + s.addr() + "/0", config.RedisOptions{Password: "s3cret-pass"}},
	} {
		cl, err := redisx.Connect(ctx, tc.url, tc.o)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if who, err := cl.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "ferry" {
			t.Errorf("%s: ACL WHOAMI = %q, %v", name, who, err)
		}
		cl.Close()
	}
}

// TestTLS connects over TLS with the configured CA, and refuses a server
// whose certificate the CA did not sign, saying what to check.
func TestTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCerts(t, dir, "ca")
	otherCA, _, _ := writeCerts(t, filepath.Join(dir, "other"), "other")
	port, err := devstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, 0, fmt.Sprintf("tls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients no",
		port, certFile, keyFile, caFile))
	waitPort(t, s, port)
	addr := "127.0.0.1:" + strconv.Itoa(port)

	cl, err := redisx.Connect(ctx, "redis://"+addr+"/0", config.RedisOptions{TLS: true, TLSCAFile: caFile})
	if err != nil {
		t.Fatalf("TLS with the CA: %v", err)
	}
	if err := cl.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	cl, err = redisx.Connect(ctx, "rediss://"+addr+"/0", config.RedisOptions{TLSCAFile: caFile})
	if err != nil {
		t.Fatalf("rediss:// URL with the CA: %v", err)
	}
	cl.Close()

	_, err = redisx.Connect(ctx, "redis://"+addr+"/0", config.RedisOptions{TLSCAFile: otherCA})
	if err == nil || !strings.Contains(err.Error(), "FERRY_REDIS_TLS_CA_FILE") {
		t.Fatalf("a certificate of another CA: err = %v, want a TLS error naming FERRY_REDIS_TLS_CA_FILE", err)
	}
	_, err = redisx.Connect(ctx, "redis://"+addr+"/0", config.RedisOptions{TLSCAFile: caFile, TLSServerName: "not-the-server"})
	if err == nil || !strings.Contains(err.Error(), "FERRY_REDIS_TLS_SERVER_NAME") {
		t.Fatalf("a wrong server name: err = %v, want a TLS error naming FERRY_REDIS_TLS_SERVER_NAME", err)
	}
}

// TestValidate: settings that cannot work are refused before dialling.
func TestValidate(t *testing.T) {
	ctx := context.Background()
	for name, o := range map[string]config.RedisOptions{
		"sentinel without master":  {SentinelAddrs: []string{"127.0.0.1:1"}},
		"master without sentinels": {SentinelMaster: "m"},
		"two passwords":            {Password: "a", PasswordFile: "/x"},
		"cert without key":         {TLSCertFile: "/x"},
	} {
		if _, err := redisx.Connect(ctx, "redis://127.0.0.1:1/0", o); err == nil || !strings.Contains(err.Error(), "FERRY_REDIS_") {
			t.Errorf("%s: err = %v, want a configuration error naming the variables", name, err)
		}
	}
	if _, err := redisx.Connect(ctx, "", config.RedisOptions{}); err == nil || !strings.Contains(err.Error(), "FERRY_REDIS_URL is empty") {
		t.Errorf("no URL, no sentinel: err = %v", err)
	}
	_, err := redisx.Connect(ctx, "redis://u:hunter2@127.0.0.1:1/x", config.RedisOptions{})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("bad URL: err = %v, want an error without the password", err)
	}
}

// writeCerts writes a CA and a server certificate for 127.0.0.1 signed by
// it into dir.
func writeCerts(t *testing.T, dir, name string) (caFile, certFile, keyFile string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writePEM(t, caFile, "CERTIFICATE", caDER)
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	return caFile, certFile, keyFile
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
