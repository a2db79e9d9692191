// Package secretbox encrypts signing secrets (webhook endpoints', and
// tenants' http-job secrets) at rest with AES-256-GCM. Signing needs the plaintext secret, so secrets cannot be
// hashed; they are sealed with a key that lives outside the database
// (FERRY_SECRET_KEY) and bound to their row through the additional data.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the length of a key: AES-256.
const KeySize = 32

// version prefixes every sealed value so the format (or the key) can change
// later without guessing.
const version byte = 1

// ErrOpen is returned when a value cannot be decrypted: wrong key, tampered
// or truncated ciphertext, or a value sealed for another row.
var ErrOpen = errors.New("secretbox: cannot decrypt (wrong FERRY_SECRET_KEY or corrupted value)")

// Box seals and opens values with one key. It is safe for concurrent use.
type Box struct{ aead cipher.AEAD }

// New returns a Box over a 32-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secretbox: key must be %d bytes, got %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plain; ad (the row id) must be given again to Open.
func (b *Box) Seal(plain, ad []byte) []byte {
	nonce := make([]byte, b.aead.NonceSize(), 1+b.aead.NonceSize()+len(plain)+b.aead.Overhead())
	_, _ = rand.Read(nonce)
	out := append([]byte{version}, nonce...)
	return b.aead.Seal(out, nonce, plain, ad)
}

// Open decrypts a value made by Seal with the same ad.
func (b *Box) Open(sealed, ad []byte) ([]byte, error) {
	ns := b.aead.NonceSize()
	if len(sealed) < 1+ns+b.aead.Overhead() || sealed[0] != version {
		return nil, ErrOpen
	}
	plain, err := b.aead.Open(nil, sealed[1:1+ns], sealed[1+ns:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

// ParseKey decodes a base64 (standard or URL alphabet, padded or not) key
// of KeySize bytes.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil {
			if len(k) != KeySize {
				return nil, fmt.Errorf("secretbox: key must decode to %d bytes, got %d", KeySize, len(k))
			}
			return k, nil
		}
	}
	return nil, errors.New("secretbox: key is not base64 (generate one with `openssl rand -base64 32`)")
}

// LoadOrCreateKeyFile reads the base64 key in path, creating the file with
// a fresh random key (mode 0600) when it does not exist. It is the
// development fallback for an unset FERRY_SECRET_KEY. created reports that
// a new key was written.
func LoadOrCreateKeyFile(path string) (key []byte, created bool, err error) {
	if b, err := os.ReadFile(path); err == nil {
		k, err := ParseKey(string(b))
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		return k, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	k := make([]byte, KeySize)
	_, _ = rand.Read(k)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) { // another process won the race
		return LoadOrCreateKeyFile(path)
	}
	if err != nil {
		return nil, false, err
	}
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(k) + "\n"); err != nil {
		f.Close()
		return nil, false, err
	}
	return k, true, f.Close()
}

// FromKeyOrFile returns a Box over key or, when key is empty (the
// development fallback for an unset FERRY_SECRET_KEY), over the key in file,
// created with a random key when missing. Every process of a deployment
// must use the same key: what one seals, another opens. fromFile and
// created say which key was used, for the caller's warning.
func FromKeyOrFile(key []byte, file string) (b *Box, fromFile, created bool, err error) {
	if len(key) == 0 {
		if file == "" {
			return nil, false, false, errors.New("secretbox: FERRY_SECRET_KEY is not set")
		}
		key, created, err = LoadOrCreateKeyFile(file)
		if err != nil {
			return nil, true, false, fmt.Errorf("secretbox: FERRY_SECRET_KEY unset and key file unusable: %w", err)
		}
		fromFile = true
	}
	b, err = New(key)
	return b, fromFile, created, err
}
