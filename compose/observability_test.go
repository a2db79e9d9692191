package compose

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// metricsGolden holds the metric names Ferry exposes on /metrics. It is
// written from a live scrape by cmd/ferry's TestObservability, which fails
// when the file no longer matches what Ferry registers.
const metricsGolden = "testdata/metrics.txt"

// notFerry are series the dashboards may use that Ferry does not register:
// Prometheus' own up, and the span metrics the OTel collector derives.
var notFerry = []*regexp.Regexp{regexp.MustCompile(`^up$`), regexp.MustCompile(`^traces_span_metrics_`)}

func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(metricsGolden)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			names[l] = true
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s lists no metrics", metricsGolden)
	}
	return names
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promBraces    = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promKeywords  = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
	promNumberish = regexp.MustCompile(`^[0-9]`)
)

// metricsIn returns the metric names a PromQL expression selects: what is
// left once strings, label matchers, ranges, grouping clauses, function
// calls and keywords are removed.
func metricsIn(expr string) []string {
	s := promStrings.ReplaceAllString(expr, " ")
	s = promBraces.ReplaceAllString(s, " ")
	s = promRanges.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || promKeywords[strings.ToLower(id)] || promNumberish.MatchString(id) {
			continue
		}
		if loc[0] > 0 && strings.IndexByte("$.0123456789", s[loc[0]-1]) >= 0 {
			continue // a Grafana variable or part of a number (1e3)
		}
		out = append(out, id)
	}
	return out
}

func TestMetricsIn(t *testing.T) {
	got := metricsIn(`histogram_quantile(0.95, sum by (queue, le) (rate(ferry_x_bucket{job=~"a.*", q="b c"}[$__rate_interval]))) / ignoring(le) ferry_y > 1e3 and on(queue) up`)
	want := []string{"ferry_x_bucket", "ferry_y", "up"}
	if !slices.Equal(got, want) {
		t.Fatalf("metricsIn = %v, want %v", got, want)
	}
}

func checkExpr(t *testing.T, where, expr string, known map[string]bool) {
	t.Helper()
	names := metricsIn(expr)
	if len(names) == 0 {
		t.Errorf("%s: no metric found in %q", where, expr)
	}
	for _, n := range names {
		if known[n] || slices.ContainsFunc(notFerry, func(r *regexp.Regexp) bool { return r.MatchString(n) }) {
			continue
		}
		t.Errorf("%s: %q uses %s, which Ferry does not register (see %s)", where, expr, n, metricsGolden)
	}
}

// TestDashboardMetricsExist: every query of the provisioned dashboard uses
// metrics Ferry registers, and the dashboard covers queue health, latency,
// failures and lag.
func TestDashboardMetricsExist(t *testing.T) {
	known := registeredMetrics(t)
	b, err := os.ReadFile("grafana/dashboards/ferry.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			checkExpr(t, "dashboard panel "+p.Title, tg.Expr, known)
			for _, n := range metricsIn(tg.Expr) {
				used[n] = true
			}
		}
	}
	for _, n := range []string{"ferry_queue_ready", "ferry_queue_oldest_ready_age_seconds", "ferry_worker_start_latency_seconds_bucket",
		"ferry_scheduler_dead_letters_total", "ferry_kafka_consumer_lag", "ferry_worker_running", "ferry_worker_held"} {
		if !used[n] {
			t.Errorf("the dashboard has no panel on %s", n)
		}
	}
}

// TestAlertRulesMetricsExist: the alert rules parse, Prometheus loads them,
// and they use only metrics Ferry registers, covering oldest ready age, DLQ
// growth and consumer lag.
func TestAlertRulesMetricsExist(t *testing.T) {
	known := registeredMetrics(t)
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
				For   string `yaml:"for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("group %s: a rule without alert name or expr", g.Name)
				continue
			}
			checkExpr(t, "alert "+r.Alert, r.Expr, known)
			for _, n := range metricsIn(r.Expr) {
				used[n] = true
			}
		}
	}
	for _, n := range []string{"ferry_queue_oldest_ready_age_seconds", "ferry_scheduler_dead_letters_total", "ferry_kafka_consumer_lag"} {
		if !used[n] {
			t.Errorf("no alert rule on %s", n)
		}
	}
	// Prometheus loads the file: prometheus.yml names it and compose mounts it.
	pcfg, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var prom struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	if err := yaml.Unmarshal(pcfg, &prom); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(prom.RuleFiles, "/etc/prometheus/alerts.yml") {
		t.Errorf("prometheus.yml rule_files = %v, want /etc/prometheus/alerts.yml", prom.RuleFiles)
	}
	compose, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(compose), "./prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro") {
		t.Errorf("%s does not mount prometheus/alerts.yml", composePath)
	}
}
