package webhooks

import (
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/config"
)

func TestLoadConfig(t *testing.T) {
	env := map[string]string{
		"FERRY_SECRET_KEY":       "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
		"FERRY_WEBHOOKS_BACKOFF": "1s, 1m",
		"FERRY_DATA_DIR":         "/tmp/x",
	}
	l := config.NewLoader(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	c := LoadConfig(l).WithDefaults()
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.SecretKey) != 32 || len(c.Backoff) != 2 || c.Backoff[1] != time.Minute || c.Timeout != 10*time.Second ||
		c.EndpointConcurrency != 4 || c.SecretKeyFile != "/tmp/x/secret-key" ||
		c.Retention != 720*time.Hour || c.RetentionInterval != time.Minute || c.RetentionChunk != 1000 {
		t.Fatalf("config = %+v", c)
	}

	env["FERRY_WEBHOOKS_RETENTION"] = "48h"
	if c := LoadConfig(config.NewLoader(func(k string) (string, bool) { v, ok := env[k]; return v, ok })); c.Retention != 48*time.Hour {
		t.Fatalf("Retention = %s", c.Retention)
	}

	env["FERRY_SECRET_KEY"], env["FERRY_WEBHOOKS_BACKOFF"], env["FERRY_WEBHOOKS_RETENTION"] = "c2hvcnQ=", "1s,soon", "30m"
	err := LoadConfig(config.NewLoader(func(k string) (string, bool) { v, ok := env[k]; return v, ok })).WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "FERRY_SECRET_KEY") || !strings.Contains(err.Error(), "soon") ||
		!strings.Contains(err.Error(), "FERRY_WEBHOOKS_RETENTION") {
		t.Fatalf("Validate = %v", err)
	}
}
