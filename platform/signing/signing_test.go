package signing

import (
	"strings"
	"testing"
	"time"
)

// The example of the Standard Webhooks specification.
func TestSpecVector(t *testing.T) {
	key, err := Key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestHeaderAndSecrets(t *testing.T) {
	s := NewSecret()
	if !strings.HasPrefix(s, SecretPrefix) {
		t.Fatal(s)
	}
	k, err := Key(s)
	if err != nil || len(k) != 32 {
		t.Fatalf("Key: %d %v", len(k), err)
	}
	if _, err := Key("nope"); err == nil {
		t.Fatal("bad secret accepted")
	}
	h := Header([][]byte{k, []byte("old")}, "msg_1", time.Unix(1, 0), []byte("{}"))
	if len(strings.Fields(h)) != 2 {
		t.Fatal(h)
	}
}
