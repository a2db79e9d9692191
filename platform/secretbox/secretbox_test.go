package secretbox

import (
	"bytes"
	"crypto/rand"
	"errors"
	"path/filepath"
	"testing"
)

func TestSealOpen(t *testing.T) {
	key := make([]byte, KeySize)
	_, _ = rand.Read(key)
	b, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	sealed := b.Seal([]byte("whsec_abc"), []byte("wh_1"))
	if bytes.Contains(sealed, []byte("whsec_abc")) {
		t.Fatal("plaintext in sealed value")
	}
	if got, err := b.Open(sealed, []byte("wh_1")); err != nil || string(got) != "whsec_abc" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := b.Open(sealed, []byte("wh_2")); !errors.Is(err, ErrOpen) {
		t.Fatalf("other row's ad opened: %v", err)
	}
	other, _ := New(make([]byte, KeySize))
	if _, err := other.Open(sealed, []byte("wh_1")); !errors.Is(err, ErrOpen) {
		t.Fatalf("other key opened: %v", err)
	}
	if _, err := b.Open(sealed[:5], nil); !errors.Is(err, ErrOpen) {
		t.Fatalf("truncated: %v", err)
	}
}

func TestKeys(t *testing.T) {
	if _, err := ParseKey("c2hvcnQ="); err == nil {
		t.Fatal("short key accepted")
	}
	path := filepath.Join(t.TempDir(), "d", "secret-key")
	k1, created, err := LoadOrCreateKeyFile(path)
	if err != nil || !created || len(k1) != KeySize {
		t.Fatalf("create: %v %v", created, err)
	}
	k2, created, err := LoadOrCreateKeyFile(path)
	if err != nil || created || !bytes.Equal(k1, k2) {
		t.Fatalf("reload: %v %v", created, err)
	}
}
