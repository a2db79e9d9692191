package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/cmd/ferry/internal/cli"
)

// TestCLIAgainstStack runs `ferry jobs` against the whole stack: submit
// --wait, get --json, list by tag, and cancel, whose answer holds the job.
func TestCLIAgainstStack(t *testing.T) {
	e := startStack(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := map[string]string{"FERRY_URL": e.base, "FERRY_API_KEY": e.key, "FERRY_DATA_DIR": t.TempDir()}
	jobs := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cli.Jobs(ctx, args, func(k string) string { return env[k] }, &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := jobs("submit", "--type", "sleep", "--payload", `{"ms":100}`, "--tag", "cli-e2e", "--wait", "--wait-interval", "50ms")
	id := regexp.MustCompile(`(?m)^id:\s+(job_\S+)$`).FindStringSubmatch(out)
	if code != 0 || id == nil || !regexp.MustCompile(`(?m)^status:\s+succeeded$`).MatchString(out) ||
		!strings.Contains(out, `"slept_ms":100`) {
		t.Fatalf("submit --wait: exit %d\n%s\n%s", code, out, errOut)
	}

	code, out, _ = jobs("get", id[1], "--json")
	var j map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &j) != nil || j["id"] != id[1] || j["status"] != "succeeded" {
		t.Fatalf("get --json: exit %d\n%s", code, out)
	}

	code, out, _ = jobs("list", "--tag", "cli-e2e")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], id[1]+" ") {
		t.Fatalf("list --tag: exit %d\n%s", code, out)
	}

	code, out, errOut = jobs("submit", "--type", "sleep", "--payload", `{"ms":60000}`, "--delay", "1h")
	later := regexp.MustCompile(`(?m)^id:\s+(job_\S+)$`).FindStringSubmatch(out)
	if code != 0 || later == nil {
		t.Fatalf("submit: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = jobs("cancel", later[1])
	if code != 0 || !strings.Contains(out, later[1]) || !regexp.MustCompile(`(?m)^status:\s+scheduled$`).MatchString(out) {
		t.Fatalf("cancel: exit %d\n%s\n%s", code, out, errOut)
	}
	e.waitStatus(later[1], "cancelled", time.Minute)
	code, _, errOut = jobs("cancel", later[1])
	if code != 1 || !strings.HasPrefix(errOut, "error: job_finished: ") {
		t.Fatalf("cancel a cancelled job: exit %d, stderr %q", code, errOut)
	}
}
