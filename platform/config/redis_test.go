package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestLoadRedisOptions: TLS is implied by a CA file, sentinels are a list,
// and a dumped configuration never carries the passwords.
func TestLoadRedisOptions(t *testing.T) {
	env := map[string]string{
		"FERRY_REDIS_USERNAME":          "ferry",
		"FERRY_REDIS_PASSWORD":          "pw-in-env",
		"FERRY_REDIS_TLS_CA_FILE":       "/ca.pem",
		"FERRY_REDIS_SENTINEL_ADDRS":    "10.0.0.1:26379, 10.0.0.2:26379",
		"FERRY_REDIS_SENTINEL_MASTER":   "ferry",
		"FERRY_REDIS_SENTINEL_PASSWORD": "sentinel-pw",
	}
	l := NewLoader(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	o := LoadRedisOptions(l)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	if !o.TLS || !o.Sentinel() || len(o.SentinelAddrs) != 2 || o.SentinelAddrs[1] != "10.0.0.2:26379" || o.Username != "ferry" {
		t.Fatalf("loaded %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, dump := range []string{fmt.Sprintf("%v", o), fmt.Sprintf("%+v", o), fmt.Sprintf("%#v", o)} {
		if strings.Contains(dump, "pw-in-env") || strings.Contains(dump, "sentinel-pw") {
			t.Errorf("a dump carries a password: %s", dump)
		}
	}
	if o.Password.Reveal() != "pw-in-env" {
		t.Errorf("Reveal = %q", o.Password.Reveal())
	}
}

// TestCommonValidatesRedis: LoadCommon reads the Redis options and
// Validate reports a Sentinel setting without its pair.
func TestCommonValidatesRedis(t *testing.T) {
	env := map[string]string{"FERRY_REDIS_SENTINEL_ADDRS": "127.0.0.1:26379"}
	c := LoadCommon(NewLoader(func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "FERRY_REDIS_SENTINEL_MASTER") {
		t.Fatalf("Validate = %v, want an error naming FERRY_REDIS_SENTINEL_MASTER", err)
	}
}
