package compose

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/config"
	"gopkg.in/yaml.v3"
)

// Paths are relative to this directory (compose/), where `go test` runs.
const (
	composePath = "docker-compose.yml"
	readmePath  = "README.md"
	repoRoot    = ".."
)

// ferrySpec is what the deployment must provide for one Ferry service.
type ferrySpec struct {
	name       string   // compose service name
	dockerfile string   // relative to the repository root
	postgres   bool     // needs FERRY_POSTGRES_URL
	redis      bool     // needs FERRY_REDIS_URL
	secrets    []string // secret variables it must get from compose/.env
	env        map[string]string
}

// secretVars may only be set as ${NAME:?…}: taken from compose/.env or the
// shell, required, and never written into the compose file.
var secretVars = []string{"FERRY_ADMIN_KEY", "FERRY_SECRET_KEY", "FERRY_API_KEY", "FERRY_DEV_API_KEY"}

var ferryServices = []ferrySpec{
	{name: "api", dockerfile: "services/api/Dockerfile", postgres: true, redis: true, secrets: []string{"FERRY_ADMIN_KEY", "FERRY_SECRET_KEY"}},
	{name: "scheduler", dockerfile: "services/scheduler/Dockerfile", postgres: true, redis: true, secrets: []string{"FERRY_ADMIN_KEY"}},
	{name: "worker-short", dockerfile: "services/worker/Dockerfile", postgres: true, secrets: []string{"FERRY_SECRET_KEY"}, env: map[string]string{"FERRY_WORKER_POOL": "short"}},
	{name: "worker-long", dockerfile: "services/worker/Dockerfile", postgres: true, secrets: []string{"FERRY_SECRET_KEY"}, env: map[string]string{"FERRY_WORKER_POOL": "long"}},
	{name: "dlq", dockerfile: "services/dlq/Dockerfile", postgres: true},
	{name: "sse-bridge", dockerfile: "services/sse-bridge/Dockerfile", postgres: true},
	{name: "audit", dockerfile: "services/audit/Dockerfile", postgres: true},
	{name: "webhooks", dockerfile: "services/webhooks/Dockerfile", postgres: true, secrets: []string{"FERRY_SECRET_KEY"}},
}

// serviceModules are the Go modules under services/ that each ship an image.
var serviceModules = []string{"api", "scheduler", "worker", "dlq", "sse-bridge", "audit", "webhooks"}

func specFor(t *testing.T, name string) ferrySpec {
	t.Helper()
	for _, s := range ferryServices {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no spec for %s", name)
	return ferrySpec{}
}

// ---------------------------------------------------------------------------
// The compose model: only the parts the checks read. Both the short and the
// long Compose syntaxes are accepted where Compose accepts both.
// ---------------------------------------------------------------------------

type composeDoc struct {
	Services map[string]*service `yaml:"services"`
	Volumes  map[string]any      `yaml:"volumes"`
}

type service struct {
	Image           string       `yaml:"image"`
	Hostname        string       `yaml:"hostname"`
	Build           *buildSpec   `yaml:"build"`
	Environment     envVars      `yaml:"environment"`
	EnvFile         any          `yaml:"env_file"`
	DependsOn       dependsOn    `yaml:"depends_on"`
	Volumes         []mount      `yaml:"volumes"`
	Healthcheck     *healthcheck `yaml:"healthcheck"`
	Command         stringList   `yaml:"command"`
	StopGracePeriod string       `yaml:"stop_grace_period"`
}

type buildSpec struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

func (b *buildSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		b.Context = n.Value
		return nil
	}
	type plain buildSpec
	return n.Decode((*plain)(b))
}

// envVars is `environment:` as a map or a list of NAME=value.
type envVars map[string]string

func (e *envVars) UnmarshalYAML(n *yaml.Node) error {
	out := envVars{}
	switch n.Kind {
	case yaml.MappingNode:
		var m map[string]any // Decode resolves `<<: *anchor` merges.
		if err := n.Decode(&m); err != nil {
			return err
		}
		for k, v := range m {
			if v == nil {
				out[k] = ""
			} else {
				out[k] = fmt.Sprint(v)
			}
		}
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, item := range l {
			k, v, _ := strings.Cut(item, "=")
			out[k] = v
		}
	default:
		return fmt.Errorf("line %d: environment must be a map or a list", n.Line)
	}
	*e = out
	return nil
}

// dependsOn maps a dependency to its condition.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	out := dependsOn{}
	switch n.Kind {
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, s := range l {
			out[s] = "service_started"
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		for k, v := range m {
			if v.Condition == "" {
				v.Condition = "service_started"
			}
			out[k] = v.Condition
		}
	default:
		return fmt.Errorf("line %d: depends_on must be a map or a list", n.Line)
	}
	*d = out
	return nil
}

// mount is one entry of a service's `volumes:`.
type mount struct {
	Type   string `yaml:"type"` // bind or volume
	Source string `yaml:"source"`
	Target string `yaml:"target"`
}

func (m *mount) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		type plain mount
		return n.Decode((*plain)(m))
	}
	parts := strings.Split(n.Value, ":")
	if len(parts) == 1 { // anonymous volume
		m.Type, m.Target = "volume", parts[0]
		return nil
	}
	m.Source, m.Target = parts[0], parts[1]
	m.Type = "volume"
	if strings.HasPrefix(m.Source, ".") || strings.HasPrefix(m.Source, "/") || strings.HasPrefix(m.Source, "~") {
		m.Type = "bind"
	}
	return nil
}

type healthcheck struct {
	Test    any  `yaml:"test"`
	Disable bool `yaml:"disable"`
}

// stringList is a command: a string or a list of arguments.
type stringList []string

func (s *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = strings.Fields(n.Value)
		return nil
	}
	var l []string
	if err := n.Decode(&l); err != nil {
		return err
	}
	*s = l
	return nil
}

func parseCompose(data []byte) (*composeDoc, error) {
	var doc composeDoc
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Services == nil {
		return nil, errors.New("no services")
	}
	return &doc, nil
}

func loadCompose(t *testing.T) (*composeDoc, []byte) {
	t.Helper()
	data, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parseCompose(data)
	if err != nil {
		t.Fatalf("%s: %v", composePath, err)
	}
	return doc, data
}

func report(t *testing.T, errs []error) {
	t.Helper()
	for _, err := range errs {
		t.Error(err)
	}
}

// problems collects errors prefixed with a subject.
type problems struct {
	subject string
	errs    []error
}

func (p *problems) add(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", p.subject, fmt.Sprintf(format, args...)))
}

// interpolation matches Compose's ${NAME}, ${NAME:-default}, ${NAME:?error}, …
var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}`)

// literal replaces interpolations with a placeholder so a value can be parsed.
func literal(s string) string { return interpolation.ReplaceAllString(s, "interpolated") }

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func isFerryVarName(name string) bool {
	return strings.HasPrefix(name, "FERRY_") || strings.HasPrefix(name, "OTEL_")
}

// hostPath maps a path inside a service's container to the file of this
// directory that a bind mount puts there.
func hostPath(s *service, containerPath string) (string, bool) {
	for _, m := range s.Volumes {
		if m.Type != "bind" {
			continue
		}
		if containerPath == m.Target {
			return filepath.Clean(m.Source), true
		}
		if rel, ok := strings.CutPrefix(containerPath, strings.TrimSuffix(m.Target, "/")+"/"); ok {
			return filepath.Join(m.Source, filepath.FromSlash(rel)), true
		}
	}
	return "", false
}

func hasNamedVolumeAt(s *service, target string) bool {
	for _, m := range s.Volumes {
		if m.Type == "volume" && m.Source != "" && path.Clean(m.Target) == path.Clean(target) {
			return true
		}
	}
	return false
}

func servicesWithImage(doc *composeDoc, prefix string) []string {
	var out []string
	for name, s := range doc.Services {
		if strings.HasPrefix(s.Image, prefix) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// ---------------------------------------------------------------------------
// Checks. Each returns every problem it finds, so the negative tests can
// feed them modified documents.
// ---------------------------------------------------------------------------

// checkEnvNames: a Ferry service may set only variables declared in
// config.Vars; any service that sets a FERRY_/OTEL_ name must use a declared one.
func checkEnvNames(name string, s *service, ferry bool) []error {
	p := problems{subject: name}
	names := make([]string, 0, len(s.Environment))
	for k := range s.Environment {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		_, declared := config.Lookup(k)
		switch {
		case ferry && !isFerryVarName(k):
			p.add("environment variable %s is not a FERRY_* or OTEL_* name; Ferry reads only variables declared in platform/config/vars.go", k)
		case isFerryVarName(k) && !declared:
			p.add("environment variable %s is not declared in config.Vars (platform/config/vars.go); Ferry would ignore it", k)
		}
	}
	if ferry && s.EnvFile != nil {
		p.add("env_file is not allowed on a Ferry service: its variable names cannot be checked against config.Vars; use ${NAME} interpolation")
	}
	return p.errs
}

// checkKafka checks the KRaft cluster and returns the addresses other
// containers reach the brokers at.
func checkKafka(doc *composeDoc) (brokers []string, errs []error) {
	names := servicesWithImage(doc, "apache/kafka")
	if len(names) != 3 {
		errs = append(errs, fmt.Errorf("want 3 Kafka nodes (image apache/kafka), found %d: %v", len(names), names))
	}
	type node struct {
		service  string
		ctrlPort string
	}
	nodes := map[string]node{} // KAFKA_NODE_ID → node
	var voters, clusterID string
	for i, name := range names {
		s := doc.Services[name]
		env := s.Environment
		p := problems{subject: name}

		roles := splitList(env["KAFKA_PROCESS_ROLES"])
		if !slices.Contains(roles, "broker") || !slices.Contains(roles, "controller") {
			p.add("KAFKA_PROCESS_ROLES=%q, want broker,controller (combined KRaft node)", env["KAFKA_PROCESS_ROLES"])
		}
		if i == 0 {
			voters, clusterID = env["KAFKA_CONTROLLER_QUORUM_VOTERS"], env["CLUSTER_ID"]
		}
		if env["CLUSTER_ID"] == "" {
			p.add("CLUSTER_ID is empty")
		} else if env["CLUSTER_ID"] != clusterID {
			p.add("CLUSTER_ID %q differs from %s's %q: the nodes would not form one cluster", env["CLUSTER_ID"], names[0], clusterID)
		}
		if env["KAFKA_CONTROLLER_QUORUM_VOTERS"] != voters {
			p.add("KAFKA_CONTROLLER_QUORUM_VOTERS %q differs from %s's %q", env["KAFKA_CONTROLLER_QUORUM_VOTERS"], names[0], voters)
		}
		for k, want := range map[string]string{
			"KAFKA_DEFAULT_REPLICATION_FACTOR":               "3",
			"KAFKA_MIN_INSYNC_REPLICAS":                      "2",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "3",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "2",
		} {
			if env[k] != want {
				p.add("%s=%q, want %s", k, env[k], want)
			}
		}

		listeners := parseListeners(env["KAFKA_LISTENERS"])
		advertised := parseListeners(env["KAFKA_ADVERTISED_LISTENERS"])
		protocols := map[string]bool{}
		for _, pair := range splitList(env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]) {
			l, _, _ := strings.Cut(pair, ":")
			protocols[l] = true
		}
		for l := range listeners {
			if !protocols[l] {
				p.add("listener %s has no entry in KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", l)
			}
		}
		ctrl := env["KAFKA_CONTROLLER_LISTENER_NAMES"]
		ctrlAddr, ok := listeners[ctrl]
		if !ok {
			p.add("controller listener %q is not in KAFKA_LISTENERS", ctrl)
		}
		_, ctrlPort, _ := net.SplitHostPort(ctrlAddr)
		ibl := env["KAFKA_INTER_BROKER_LISTENER_NAME"]
		if addr, ok := advertised[ibl]; !ok {
			p.add("inter-broker listener %q is not advertised", ibl)
		} else if host, _, err := net.SplitHostPort(addr); err != nil || (host != name && host != s.Hostname) {
			p.add("advertises %s as %s: other containers reach it as %s", ibl, addr, name)
		} else {
			brokers = append(brokers, addr)
		}

		id := env["KAFKA_NODE_ID"]
		if id == "" {
			p.add("KAFKA_NODE_ID is not set")
		} else if other, dup := nodes[id]; dup {
			p.add("KAFKA_NODE_ID %s is also %s's", id, other.service)
		} else {
			nodes[id] = node{service: name, ctrlPort: ctrlPort}
		}
		if s.Healthcheck == nil || s.Healthcheck.Disable {
			p.add("no healthcheck: Ferry services cannot wait for the broker")
		}
		if dir := env["KAFKA_LOG_DIRS"]; dir == "" || !hasNamedVolumeAt(s, dir) {
			p.add("no named volume at KAFKA_LOG_DIRS %q: the log would be lost with the container", dir)
		}
		errs = append(errs, p.errs...)
	}

	// Every node is a voter, named by the address it is reachable at.
	vs := splitList(voters)
	if len(vs) != len(names) {
		errs = append(errs, fmt.Errorf("KAFKA_CONTROLLER_QUORUM_VOTERS %q lists %d voters for %d nodes", voters, len(vs), len(names)))
	}
	for _, v := range vs {
		id, hp, _ := strings.Cut(v, "@")
		host, port, err := net.SplitHostPort(hp)
		n, ok := nodes[id]
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("voter %q: %v", v, err))
		case !ok:
			errs = append(errs, fmt.Errorf("voter %q: no node has KAFKA_NODE_ID %s", v, id))
		case host != n.service && host != doc.Services[n.service].Hostname:
			errs = append(errs, fmt.Errorf("voter %q: node %s is service %s", v, id, n.service))
		case port != n.ctrlPort:
			errs = append(errs, fmt.Errorf("voter %q: %s's controller listener is on port %s", v, n.service, n.ctrlPort))
		}
	}
	sort.Strings(brokers)
	return brokers, errs
}

// parseListeners turns "NAME://host:port,…" into NAME → host:port.
func parseListeners(s string) map[string]string {
	out := map[string]string{}
	for _, l := range splitList(s) {
		name, addr, _ := strings.Cut(l, "://")
		out[name] = addr
	}
	return out
}

// checkFerryService checks one Ferry service against its spec.
func checkFerryService(doc *composeDoc, spec ferrySpec, brokers []string) []error {
	s, ok := doc.Services[spec.name]
	if !ok {
		return []error{fmt.Errorf("service %s is missing", spec.name)}
	}
	p := problems{subject: spec.name}
	p.errs = append(p.errs, checkEnvNames(spec.name, s, true)...)
	env := s.Environment

	// Built from its Dockerfile with the repository root as the context.
	if s.Build == nil {
		p.add("has no build: section; it must build from %s", spec.dockerfile)
	} else {
		ctx := filepath.Clean(s.Build.Context)
		root := filepath.Clean(repoRoot)
		if ctx != root {
			p.add("build context %q, want %q (the repository root, so go.work resolves)", s.Build.Context, repoRoot)
		}
		df := s.Build.Dockerfile
		if df == "" {
			df = "Dockerfile"
		}
		if got := filepath.ToSlash(filepath.Clean(df)); got != spec.dockerfile {
			p.add("builds from %s, want %s", got, spec.dockerfile)
		}
		if _, err := os.Stat(filepath.Join(ctx, df)); err != nil {
			p.add("Dockerfile: %v", err)
		}
	}

	if got := env["FERRY_HTTP_ADDR"]; got != "0.0.0.0:8080" {
		p.add("FERRY_HTTP_ADDR=%q, want 0.0.0.0:8080 (reachable from other containers)", got)
	}
	got := splitList(env["FERRY_KAFKA_BROKERS"])
	sort.Strings(got)
	if !slices.Equal(got, brokers) {
		p.add("FERRY_KAFKA_BROKERS=%q, want all brokers %v", env["FERRY_KAFKA_BROKERS"], brokers)
	}
	for _, b := range brokers {
		host, _, _ := net.SplitHostPort(b)
		if s.DependsOn[host] != "service_healthy" {
			p.add("does not depend on %s being healthy", host)
		}
	}

	checkTopicDurability(&p, env, len(brokers))

	checkStore := func(needed bool, varName, image, scheme string) {
		v, set := env[varName]
		if !needed {
			return
		}
		if !set || v == "" {
			p.add("%s is not set", varName)
			return
		}
		u, err := url.Parse(literal(v))
		if err != nil {
			p.add("%s: %v", varName, err)
			return
		}
		if u.Scheme != scheme {
			p.add("%s has scheme %q, want %s", varName, u.Scheme, scheme)
		}
		target, ok := doc.Services[u.Hostname()]
		if !ok || !strings.HasPrefix(target.Image, image) {
			p.add("%s points at %q, which is not the %s service", varName, u.Host, image)
			return
		}
		if s.DependsOn[u.Hostname()] != "service_healthy" {
			p.add("does not depend on %s being healthy", u.Hostname())
		}
	}
	checkStore(spec.postgres, "FERRY_POSTGRES_URL", "postgres:", "postgres")
	checkStore(spec.redis, "FERRY_REDIS_URL", "redis:", "redis")

	for _, k := range secretVars {
		v, ok := env[k]
		if !ok {
			if slices.Contains(spec.secrets, k) {
				p.add("%s is not set", k)
			}
			continue
		}
		if !strings.HasPrefix(v, "${"+k+":?") || !strings.HasSuffix(v, "}") {
			p.add("%s must come from ${%s:?…} (compose/.env), never a literal or a default", k, k)
		}
	}
	for k, want := range spec.env {
		if env[k] != want {
			p.add("%s=%q, want %q", k, env[k], want)
		}
	}

	// Traces go to a collector of this deployment.
	if v := env["OTEL_EXPORTER_OTLP_ENDPOINT"]; v == "" {
		p.add("OTEL_EXPORTER_OTLP_ENDPOINT is not set")
	} else if u, err := url.Parse(literal(v)); err != nil || !slices.Contains(servicesWithImage(doc, "otel/opentelemetry-collector"), u.Hostname()) {
		p.add("OTEL_EXPORTER_OTLP_ENDPOINT=%q is not the OpenTelemetry collector service", v)
	}

	// Docker must not SIGKILL a service that is still stopping gracefully.
	shutdown := durationOr(env["FERRY_SHUTDOWN_TIMEOUT"], "FERRY_SHUTDOWN_TIMEOUT")
	grace, err := time.ParseDuration(cmpOr(s.StopGracePeriod, "10s"))
	if err != nil {
		p.add("stop_grace_period %q: %v", s.StopGracePeriod, err)
	} else if grace <= shutdown {
		p.add("stop_grace_period %s ≤ FERRY_SHUTDOWN_TIMEOUT %s: Docker would kill it mid-shutdown", grace, shutdown)
	}
	if _, ok := env["FERRY_WORKER_POOL"]; ok {
		if wg := durationOr(env["FERRY_WORKER_GRACE"], "FERRY_WORKER_GRACE"); wg >= shutdown {
			p.add("FERRY_WORKER_GRACE %s ≥ FERRY_SHUTDOWN_TIMEOUT %s: no time left to hand jobs back", wg, shutdown)
		}
	}
	return p.errs
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// durationOr parses v, or the declared default of name when v is empty.
func durationOr(v, name string) time.Duration {
	if v == "" {
		decl, _ := config.Lookup(name)
		v = decl.Default
	}
	d, _ := time.ParseDuration(v)
	return d
}

// checkMounts: every file or directory a service bind-mounts exists here,
// and every named volume is declared.
func checkMounts(doc *composeDoc, dir string) []error {
	var errs []error
	for _, name := range sortedKeys(doc.Services) {
		for _, m := range doc.Services[name].Volumes {
			switch {
			case m.Type == "bind" && filepath.IsAbs(m.Source):
				errs = append(errs, fmt.Errorf("%s: bind mount %s is an absolute host path; mount files of this directory", name, m.Source))
			case m.Type == "bind":
				if _, err := os.Stat(filepath.Join(dir, m.Source)); err != nil {
					errs = append(errs, fmt.Errorf("%s: mounts %s at %s: %v", name, m.Source, m.Target, err))
				}
			case m.Source != "":
				if _, ok := doc.Volumes[m.Source]; !ok {
					errs = append(errs, fmt.Errorf("%s: volume %s is not declared under volumes:", name, m.Source))
				}
			}
		}
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ---------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------

// checkTopicDurability: the services create topics the brokers can hold,
// replicated so that one broker can fail without losing or refusing
// acknowledged writes, and run in production mode, which refuses to start
// on existing topics that could lose them.
func checkTopicDurability(p *problems, env map[string]string, nbrokers int) {
	if got := cmpOr(env["FERRY_ENV"], "(default)"); got != "production" {
		p.add("FERRY_ENV=%s, want production (refuse topics that could lose acknowledged records)", got)
	}
	setting := func(name string) int {
		v, ok := env[name]
		if !ok {
			d, _ := config.Lookup(name)
			v = d.Default
		}
		n, err := strconv.Atoi(literal(v))
		if err != nil {
			p.add("%s=%q: want a literal integer", name, v)
		}
		return n
	}
	rf, minInsync := setting("FERRY_TOPIC_REPLICATION"), setting("FERRY_TOPIC_MIN_INSYNC")
	if rf > nbrokers {
		p.add("FERRY_TOPIC_REPLICATION %d > %d brokers: creating the topics would fail", rf, nbrokers)
	}
	if minInsync < 2 || minInsync >= rf {
		p.add("FERRY_TOPIC_MIN_INSYNC %d with FERRY_TOPIC_REPLICATION %d: want 2 ≤ min.insync < replication, so one broker can fail without losing or refusing writes", minInsync, rf)
	}
}

func TestTopicDurabilityCheckCatchesUnsafeSettings(t *testing.T) {
	_, data := loadCompose(t)
	for _, tc := range []struct{ from, to, want string }{
		{"  FERRY_TOPIC_MIN_INSYNC: \"2\"\n", "  FERRY_TOPIC_MIN_INSYNC: \"1\"\n", "FERRY_TOPIC_MIN_INSYNC 1"},
		{"  FERRY_TOPIC_MIN_INSYNC: \"2\"\n", "  FERRY_TOPIC_MIN_INSYNC: \"3\"\n", "FERRY_TOPIC_MIN_INSYNC 3"},
		{"  FERRY_TOPIC_REPLICATION: \"3\"\n", "  FERRY_TOPIC_REPLICATION: \"4\"\n", "4 > 3 brokers"},
		{"  FERRY_ENV: production\n", "  FERRY_ENV: development\n", "FERRY_ENV=development"},
		{"  FERRY_ENV: production\n", "", "FERRY_ENV=(default)"},
	} {
		mod := strings.Replace(string(data), tc.from, tc.to, 1)
		if mod == string(data) {
			t.Fatalf("%q not found in %s", tc.from, composePath)
		}
		doc, err := parseCompose([]byte(mod))
		if err != nil {
			t.Fatal(err)
		}
		brokers, _ := checkKafka(doc)
		errs := checkFerryService(doc, specFor(t, "scheduler"), brokers)
		if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tc.want) }) {
			t.Errorf("%q → %q: want an error containing %q, got %v", tc.from, tc.to, tc.want, errs)
		}
	}
}

func TestFerryServices(t *testing.T) {
	doc, _ := loadCompose(t)
	brokers, _ := checkKafka(doc)
	if len(brokers) != 3 {
		t.Fatalf("Kafka brokers %v: see TestKafkaKRaftCluster", brokers)
	}
	prefixes := map[string][]string{}
	for _, spec := range ferryServices {
		t.Run(spec.name, func(t *testing.T) {
			report(t, checkFerryService(doc, spec, brokers))
		})
		if s, ok := doc.Services[spec.name]; ok {
			p := cmpOr(s.Environment["FERRY_TOPIC_PREFIX"], "(default)")
			prefixes[p] = append(prefixes[p], spec.name)
		}
	}
	if len(prefixes) > 1 {
		t.Errorf("services disagree on FERRY_TOPIC_PREFIX: %v", prefixes)
	}
}

func TestEnvNamesAllServices(t *testing.T) {
	doc, _ := loadCompose(t)
	for _, name := range sortedKeys(doc.Services) {
		ferry := slices.ContainsFunc(ferryServices, func(s ferrySpec) bool { return s.name == name })
		report(t, checkEnvNames(name, doc.Services[name], ferry))
	}
}

// TestEnvCheckRejectsUndeclaredNames proves the env-var check is not vacuous:
// the real file passes, and the same file with an undeclared name fails.
func TestEnvCheckRejectsUndeclaredNames(t *testing.T) {
	_, data := loadCompose(t)
	doc, _ := parseCompose(data)
	brokers, _ := checkKafka(doc)
	if errs := checkFerryService(doc, specFor(t, "api"), brokers); len(errs) > 0 {
		t.Fatalf("the unmodified api service must pass: %v", errs)
	}

	t.Run("one service", func(t *testing.T) {
		const anchor = "      OTEL_SERVICE_NAME: ferry-api\n"
		mod := strings.Replace(string(data), anchor, anchor+
			"      FERRY_API_TOKEN_TTL: 1h\n"+
			"      DATABASE_URL: postgres://elsewhere/db\n", 1)
		if mod == string(data) {
			t.Fatalf("anchor %q not found in %s", anchor, composePath)
		}
		doc, err := parseCompose([]byte(mod))
		if err != nil {
			t.Fatal(err)
		}
		errs := checkFerryService(doc, specFor(t, "api"), brokers)
		wantErrorsNaming(t, errs, "FERRY_API_TOKEN_TTL", "DATABASE_URL")
		if len(errs) != 2 {
			t.Errorf("want exactly 2 errors, got %v", errs)
		}
		// Other services are untouched.
		if errs := checkFerryService(doc, specFor(t, "dlq"), brokers); len(errs) > 0 {
			t.Errorf("dlq: %v", errs)
		}
	})

	t.Run("shared anchor reaches every service", func(t *testing.T) {
		const anchor = "  OTEL_EXPORTER_OTLP_ENDPOINT: http://otel-collector:4317\n"
		mod := strings.Replace(string(data), anchor, anchor+"  FERRY_TOPIC_COMPRESSION: \"zstd\"\n", 1)
		if mod == string(data) {
			t.Fatalf("anchor %q not found in %s", anchor, composePath)
		}
		doc, err := parseCompose([]byte(mod))
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range ferryServices {
			wantErrorsNaming(t, checkFerryService(doc, spec, brokers), "FERRY_TOPIC_COMPRESSION")
		}
	})

	t.Run("list syntax", func(t *testing.T) {
		doc, err := parseCompose([]byte(`
services:
  api:
    environment:
      - FERRY_HTTP_ADDR=0.0.0.0:8080
      - FERRY_KAFKA_BROKER=kafka-1:9092
      - OTEL_SERVICE_NAME=ferry-api
`))
		if err != nil {
			t.Fatal(err)
		}
		errs := checkEnvNames("api", doc.Services["api"], true)
		wantErrorsNaming(t, errs, "FERRY_KAFKA_BROKER")
		if len(errs) != 1 {
			t.Errorf("want only the undeclared name reported, got %v", errs)
		}
	})

	t.Run("other services may not misspell Ferry names either", func(t *testing.T) {
		doc, err := parseCompose([]byte("services:\n  tool:\n    image: busybox\n    environment:\n      PATH: /bin\n      FERRY_ADMINKEY: x\n"))
		if err != nil {
			t.Fatal(err)
		}
		errs := checkEnvNames("tool", doc.Services["tool"], false)
		wantErrorsNaming(t, errs, "FERRY_ADMINKEY")
		if len(errs) != 1 {
			t.Errorf("want only FERRY_ADMINKEY reported, got %v", errs)
		}
	})
}

func TestSecretsComeFromEnvFile(t *testing.T) {
	_, data := loadCompose(t)
	re := regexp.MustCompile(`(?m)^(\s+FERRY_SECRET_KEY: ).*$`)
	if !re.Match(data) {
		t.Fatalf("FERRY_SECRET_KEY not found in %s", composePath)
	}
	for _, value := range []string{"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I=", "${FERRY_SECRET_KEY:-dev}"} {
		doc, err := parseCompose(re.ReplaceAll(data, []byte("${1}"+value)))
		if err != nil {
			t.Fatal(err)
		}
		brokers, _ := checkKafka(doc)
		wantErrorsNaming(t, checkFerryService(doc, specFor(t, "webhooks"), brokers), "FERRY_SECRET_KEY")
	}
}

func wantErrorsNaming(t *testing.T, errs []error, names ...string) {
	t.Helper()
	for _, name := range names {
		found := slices.ContainsFunc(errs, func(err error) bool {
			return regexp.MustCompile(`\b` + name + `\b`).MatchString(err.Error())
		})
		if !found {
			t.Errorf("no error names %s; got %v", name, errs)
		}
	}
}

func TestKafkaKRaftCluster(t *testing.T) {
	doc, _ := loadCompose(t)
	brokers, errs := checkKafka(doc)
	report(t, errs)
	if len(brokers) != 3 {
		t.Errorf("want 3 broker addresses, got %v", brokers)
	}
}

func TestKafkaCheckCatchesBrokenQuorum(t *testing.T) {
	_, data := loadCompose(t)
	for _, tc := range []struct{ from, to, want string }{
		{"      KAFKA_NODE_ID: 3\n", "      KAFKA_NODE_ID: 2\n", "KAFKA_NODE_ID 2"},
		{"  KAFKA_MIN_INSYNC_REPLICAS: 2\n", "  KAFKA_MIN_INSYNC_REPLICAS: 1\n", "KAFKA_MIN_INSYNC_REPLICAS"},
		{"KAFKA_ADVERTISED_LISTENERS: INTERNAL://kafka-2:9092", "KAFKA_ADVERTISED_LISTENERS: INTERNAL://localhost:9092", "other containers reach it"},
	} {
		mod := strings.Replace(string(data), tc.from, tc.to, 1)
		if mod == string(data) {
			t.Fatalf("%q not found in %s", tc.from, composePath)
		}
		doc, err := parseCompose([]byte(mod))
		if err != nil {
			t.Fatal(err)
		}
		_, errs := checkKafka(doc)
		if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tc.want) }) {
			t.Errorf("%q → %q: want an error containing %q, got %v", tc.from, tc.to, tc.want, errs)
		}
	}
}

func TestPostgres(t *testing.T) {
	doc, _ := loadCompose(t)
	names := servicesWithImage(doc, "postgres:")
	if len(names) != 1 {
		t.Fatalf("want one postgres service, got %v", names)
	}
	s := doc.Services[names[0]]
	if !strings.HasPrefix(s.Image, "postgres:15") {
		t.Errorf("postgres image %s, want postgres:15", s.Image)
	}
	if !hasNamedVolumeAt(s, "/var/lib/postgresql/data") {
		t.Error("postgres: no named volume at /var/lib/postgresql/data")
	}
	if s.Healthcheck == nil || !strings.Contains(fmt.Sprint(s.Healthcheck.Test), "pg_isready") {
		t.Error("postgres: healthcheck must run pg_isready")
	}
	if pw := s.Environment["POSTGRES_PASSWORD"]; !strings.HasPrefix(pw, "${") {
		t.Errorf("postgres: POSTGRES_PASSWORD must be interpolated from compose/.env, not %q", pw)
	}
}

func TestRedis(t *testing.T) {
	doc, _ := loadCompose(t)
	names := servicesWithImage(doc, "redis:")
	if len(names) != 1 {
		t.Fatalf("want one redis service, got %v", names)
	}
	s := doc.Services[names[0]]
	if !strings.HasPrefix(s.Image, "redis:7") {
		t.Errorf("redis image %s, want redis:7", s.Image)
	}
	cmd := strings.Join(s.Command, " ")
	if !strings.Contains(cmd, "--appendonly yes") {
		t.Errorf("redis command %q: AOF (--appendonly yes) is required", cmd)
	}
	if !strings.Contains(cmd, "--maxmemory-policy noeviction") {
		t.Errorf("redis command %q: queues must never be evicted (--maxmemory-policy noeviction)", cmd)
	}
	for _, flag := range []string{"--hash-max-listpack-value 4096", "--auto-aof-rewrite-percentage 400"} {
		if !strings.Contains(cmd, flag) {
			t.Errorf("redis command %q: lacks %s (the dev Redis's setting, docs/operations.md)", cmd, flag)
		}
	}
	if !hasNamedVolumeAt(s, "/data") {
		t.Error("redis: no named volume at /data")
	}
	if s.Healthcheck == nil {
		t.Error("redis: no healthcheck")
	}
}

func TestMountedFilesExist(t *testing.T) {
	doc, _ := loadCompose(t)
	report(t, checkMounts(doc, "."))

	mod, err := parseCompose([]byte("services:\n  x:\n    image: busybox\n    volumes:\n      - ./no-such-file.yml:/etc/x.yml:ro\n      - undeclared:/data\n"))
	if err != nil {
		t.Fatal(err)
	}
	if errs := checkMounts(mod, "."); len(errs) != 2 {
		t.Errorf("want a missing file and an undeclared volume reported, got %v", errs)
	}
}

// TestInterpolatedVariables: ${FERRY_…} names are declared, and every
// variable the deployment requires (${NAME:?…}) is explained in the README.
func TestInterpolatedVariables(t *testing.T) {
	_, data := loadCompose(t)
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range interpolation.FindAllStringSubmatch(string(data), -1) {
		name, op := m[1], m[2]
		if seen[name+op] {
			continue
		}
		seen[name+op] = true
		if _, ok := config.Lookup(name); isFerryVarName(name) && !ok {
			t.Errorf("%s interpolates ${%s}, which is not declared in config.Vars", composePath, name)
		}
		if strings.HasSuffix(op, "?") && !strings.Contains(string(readme), name) {
			t.Errorf("%s requires %s but %s does not say how to set it", composePath, name, readmePath)
		}
	}
}

func TestDockerfiles(t *testing.T) {
	for _, name := range serviceModules {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(repoRoot, "services", name, "Dockerfile")
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var froms []string
			var entrypoint, user string
			var exposes []string
			var build string
			sc := bufio.NewScanner(strings.NewReader(joinContinuations(string(data))))
			for sc.Scan() {
				line := strings.TrimSpace(sc.Text())
				instr, rest, _ := strings.Cut(line, " ")
				switch strings.ToUpper(instr) {
				case "FROM":
					froms = append(froms, strings.Fields(rest)[0])
				case "ENTRYPOINT":
					entrypoint = strings.TrimSpace(rest)
				case "USER":
					user = strings.TrimSpace(rest)
				case "EXPOSE":
					exposes = append(exposes, strings.Fields(rest)...)
				case "RUN":
					if strings.Contains(rest, "go build") {
						build = rest
					}
				}
			}
			text := string(data)
			if len(froms) != 2 || !strings.HasPrefix(froms[0], "golang:1.26") || froms[1] != "gcr.io/distroless/static-debian12:nonroot" {
				t.Errorf("stages %v, want golang:1.26 then gcr.io/distroless/static-debian12:nonroot", froms)
			}
			if !strings.Contains(text, "CGO_ENABLED=0") {
				t.Error("CGO_ENABLED=0 is not set: the binary would not be static")
			}
			pkg := "./services/" + name + "/cmd/ferry-" + name
			bin := "/usr/local/bin/ferry-" + name
			if !strings.Contains(build, "go build") || !strings.HasSuffix(strings.TrimSpace(build), pkg) {
				t.Errorf("go build does not build %s: %q", pkg, build)
			}
			if !strings.Contains(text, "COPY --from=build /out/ferry-"+name+" "+bin) {
				t.Errorf("the binary is not copied to %s", bin)
			}
			if want := `["` + bin + `"]`; entrypoint != want {
				t.Errorf("ENTRYPOINT %s, want %s", entrypoint, want)
			}
			if !slices.Contains(exposes, "8080") {
				t.Errorf("EXPOSE %v, want 8080", exposes)
			}
			if user == "" || strings.HasPrefix(user, "root") || strings.HasPrefix(user, "0") {
				t.Errorf("USER %q: the image must run as non-root", user)
			}
		})
	}
}

func joinContinuations(s string) string {
	return strings.ReplaceAll(s, "\\\n", " ")
}

// TestDockerignore: the build context is the repository root; it must leave
// out local state and secrets but keep go.work and every module it uses.
func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, strings.TrimPrefix(l, "/"))
		}
	}
	for _, want := range []string{".git", ".ferry", "bin"} {
		if !slices.Contains(patterns, want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
	if !slices.ContainsFunc(patterns, func(p string) bool { return strings.Contains(p, ".env") }) {
		t.Error(".dockerignore does not exclude .env files (secrets)")
	}
	work, err := os.ReadFile(filepath.Join(repoRoot, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	keep := []string{"go.work", "go.work.sum"}
	for _, dir := range goWorkUses(string(work)) {
		keep = append(keep, path.Join(dir, "go.mod"))
	}
	if len(keep) < 3 {
		t.Fatalf("no use directives found in go.work")
	}
	for _, p := range patterns {
		for _, k := range keep {
			for _, prefix := range pathPrefixes(k) {
				if ok, _ := path.Match(p, prefix); ok {
					t.Errorf(".dockerignore pattern %q excludes %s, which the build needs", p, k)
				}
			}
		}
	}
}

// goWorkUses returns the directories of go.work's use directives.
func goWorkUses(s string) []string {
	var out []string
	inBlock := false
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "use (":
			inBlock = true
		case inBlock && l == ")":
			inBlock = false
		case inBlock && l != "":
			out = append(out, path.Clean(strings.Fields(l)[0]))
		case strings.HasPrefix(l, "use "):
			out = append(out, path.Clean(strings.Fields(l)[1]))
		}
	}
	return out
}

// pathPrefixes of a/b/c are a, a/b, a/b/c.
func pathPrefixes(p string) []string {
	var out []string
	parts := strings.Split(p, "/")
	for i := range parts {
		out = append(out, strings.Join(parts[:i+1], "/"))
	}
	return out
}

// --- Prometheus ---------------------------------------------------------

type promConfig struct {
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Type  string   `yaml:"type"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
	} `yaml:"scrape_configs"`
}

// scrapeTargets maps host:port → metrics path for every target in cfg.
func scrapeTargets(cfg promConfig) (map[string]string, []error) {
	out := map[string]string{}
	var errs []error
	jobs := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		if jobs[sc.JobName] {
			errs = append(errs, fmt.Errorf("duplicate job_name %s", sc.JobName))
		}
		jobs[sc.JobName] = true
		mp := cmpOr(sc.MetricsPath, "/metrics")
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				out[tg] = mp
			}
		}
		for _, d := range sc.DNSSDConfigs {
			if d.Type != "A" && d.Type != "AAAA" {
				errs = append(errs, fmt.Errorf("job %s: dns_sd type %q: SRV records do not exist on a compose network; use A", sc.JobName, d.Type))
			}
			for _, n := range d.Names {
				out[net.JoinHostPort(n, strconv.Itoa(d.Port))] = mp
			}
		}
	}
	return out, errs
}

func loadPrometheus(t *testing.T, doc *composeDoc) promConfig {
	t.Helper()
	names := servicesWithImage(doc, "prom/prometheus")
	if len(names) != 1 {
		t.Fatalf("want one prom/prometheus service, got %v", names)
	}
	s := doc.Services[names[0]]
	cfgPath := "/etc/prometheus/prometheus.yml"
	for _, arg := range s.Command {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			cfgPath = v
		}
	}
	file, ok := hostPath(s, cfgPath)
	if !ok {
		t.Fatalf("prometheus: %s is not mounted from this directory", cfgPath)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cfg promConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return cfg
}

func TestPrometheusScrapesEveryService(t *testing.T) {
	doc, _ := loadCompose(t)
	cfg := loadPrometheus(t, doc)
	targets, errs := scrapeTargets(cfg)
	report(t, errs)
	for _, spec := range ferryServices {
		tg := spec.name + ":8080"
		mp, ok := targets[tg]
		switch {
		case !ok:
			t.Errorf("prometheus does not scrape %s (%s)", spec.name, tg)
		case mp != "/metrics":
			t.Errorf("prometheus scrapes %s at %s, want /metrics", tg, mp)
		}
	}
	for tg := range targets {
		host, _, err := net.SplitHostPort(tg)
		if err != nil {
			t.Errorf("target %q: %v", tg, err)
			continue
		}
		if _, ok := doc.Services[host]; !ok && host != "localhost" {
			t.Errorf("prometheus scrapes %s, which is not a compose service", tg)
		}
	}
}

// --- OpenTelemetry collector --------------------------------------------

func TestOtelCollectorConfig(t *testing.T) {
	doc, _ := loadCompose(t)
	names := servicesWithImage(doc, "otel/opentelemetry-collector-contrib")
	if len(names) != 1 {
		t.Fatalf("want one otel/opentelemetry-collector-contrib service, got %v", names)
	}
	collector := names[0]
	s := doc.Services[collector]
	cfgPath := "/etc/otelcol-contrib/config.yaml"
	for _, arg := range s.Command {
		if v, ok := strings.CutPrefix(arg, "--config="); ok {
			cfgPath = v
		}
	}
	file, ok := hostPath(s, cfgPath)
	if !ok {
		t.Fatalf("%s: %s is not mounted from this directory", collector, cfgPath)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Receivers  map[string]any `yaml:"receivers"`
		Processors map[string]any `yaml:"processors"`
		Exporters  map[string]any `yaml:"exporters"`
		Connectors map[string]any `yaml:"connectors"`
		Extensions map[string]any `yaml:"extensions"`
		Service    struct {
			Extensions []string `yaml:"extensions"`
			Pipelines  map[string]struct {
				Receivers  []string `yaml:"receivers"`
				Processors []string `yaml:"processors"`
				Exporters  []string `yaml:"exporters"`
			} `yaml:"pipelines"`
		} `yaml:"service"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	defined := func(m map[string]any, id string) bool { _, ok := m[id]; return ok }
	connIn, connOut := map[string]bool{}, map[string]bool{}
	for pname, p := range cfg.Service.Pipelines {
		for _, r := range p.Receivers {
			if !defined(cfg.Receivers, r) && !defined(cfg.Connectors, r) {
				t.Errorf("pipeline %s: receiver %s is not defined", pname, r)
			}
			if defined(cfg.Connectors, r) {
				connOut[r] = true
			}
		}
		for _, pr := range p.Processors {
			if !defined(cfg.Processors, pr) {
				t.Errorf("pipeline %s: processor %s is not defined", pname, pr)
			}
		}
		for _, e := range p.Exporters {
			if !defined(cfg.Exporters, e) && !defined(cfg.Connectors, e) {
				t.Errorf("pipeline %s: exporter %s is not defined", pname, e)
			}
			if defined(cfg.Connectors, e) {
				connIn[e] = true
			}
		}
	}
	for c := range cfg.Connectors {
		if !connIn[c] || !connOut[c] {
			t.Errorf("connector %s must be an exporter in one pipeline and a receiver in another", c)
		}
	}
	for _, e := range cfg.Service.Extensions {
		if !defined(cfg.Extensions, e) {
			t.Errorf("extension %s is not defined", e)
		}
	}

	// The services' OTLP endpoint is the collector's OTLP/gRPC receiver.
	grpcEndpoint := lookupString(cfg.Receivers, "otlp", "protocols", "grpc", "endpoint")
	_, grpcPort, err := net.SplitHostPort(grpcEndpoint)
	if err != nil {
		t.Fatalf("otlp grpc receiver endpoint %q: %v", grpcEndpoint, err)
	}
	for _, spec := range ferryServices {
		if svc, ok := doc.Services[spec.name]; ok {
			u, err := url.Parse(svc.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"])
			if err != nil || u.Hostname() != collector || u.Port() != grpcPort {
				t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT=%q, want http://%s:%s", spec.name, svc.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"], collector, grpcPort)
			}
		}
	}

	// Prometheus scrapes what the collector exports.
	targets, _ := scrapeTargets(loadPrometheus(t, doc))
	for id := range cfg.Exporters {
		if strings.Split(id, "/")[0] != "prometheus" {
			continue
		}
		_, port, err := net.SplitHostPort(lookupString(cfg.Exporters, id, "endpoint"))
		if err != nil {
			t.Errorf("exporter %s: %v", id, err)
			continue
		}
		if _, ok := targets[net.JoinHostPort(collector, port)]; !ok {
			t.Errorf("prometheus does not scrape the collector's %s exporter on %s:%s", id, collector, port)
		}
	}
}

func lookupString(m map[string]any, keys ...string) string {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = mm[k]
	}
	s, _ := cur.(string)
	return s
}

// --- Grafana --------------------------------------------------------------

func TestGrafanaProvisioning(t *testing.T) {
	doc, _ := loadCompose(t)
	names := servicesWithImage(doc, "grafana/grafana")
	if len(names) != 1 {
		t.Fatalf("want one grafana/grafana service, got %v", names)
	}
	s := doc.Services[names[0]]

	dsFile, ok := hostPath(s, "/etc/grafana/provisioning/datasources/prometheus.yml")
	if !ok {
		t.Fatal("grafana: provisioning/datasources/prometheus.yml is not mounted")
	}
	var ds struct {
		Datasources []struct {
			Name string `yaml:"name"`
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	mustYAML(t, dsFile, &ds)
	uids := map[string]bool{}
	for _, d := range ds.Datasources {
		uids[d.UID] = true
		u, err := url.Parse(d.URL)
		if err != nil {
			t.Errorf("datasource %s: %v", d.Name, err)
			continue
		}
		if _, ok := doc.Services[u.Hostname()]; !ok {
			t.Errorf("datasource %s points at %s, which is not a compose service", d.Name, u.Host)
		}
	}
	if !uids["prometheus"] {
		t.Error("no datasource with uid prometheus")
	}

	provFile, ok := hostPath(s, "/etc/grafana/provisioning/dashboards/dashboards.yml")
	if !ok {
		t.Fatal("grafana: provisioning/dashboards/dashboards.yml is not mounted")
	}
	var prov struct {
		Providers []struct {
			Name    string `yaml:"name"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	mustYAML(t, provFile, &prov)
	if len(prov.Providers) == 0 {
		t.Fatal("no dashboard providers")
	}
	for _, p := range prov.Providers {
		dir, ok := hostPath(s, p.Options.Path)
		if !ok {
			t.Errorf("provider %s reads %s, which is not mounted from this directory", p.Name, p.Options.Path)
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		if len(files) == 0 {
			t.Errorf("provider %s: no dashboards in %s", p.Name, dir)
		}
		for _, f := range files {
			checkDashboard(t, f, uids)
		}
	}
	if home := s.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" {
		f, ok := hostPath(s, home)
		if _, err := os.Stat(f); !ok || err != nil {
			t.Errorf("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH %s is not a mounted file", home)
		}
	}
}

func mustYAML(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func checkDashboard(t *testing.T, file string, uids map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		t.Errorf("%s: %v", file, err)
		return
	}
	if d["uid"] == nil || d["title"] == nil {
		t.Errorf("%s: a dashboard needs a uid and a title", file)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ds, ok := v["datasource"].(map[string]any); ok {
				if uid, _ := ds["uid"].(string); uid != "" && !strings.HasPrefix(uid, "$") && !uids[uid] {
					t.Errorf("%s: datasource uid %q is not provisioned", file, uid)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(d)
}

// --- Front door -----------------------------------------------------------

// caddyRoutes reads the Caddyfile's path matchers and its reverse_proxy
// lines, in order.
type caddyRule struct {
	matcher  string
	upstream string
}

func parseCaddyfile(text string) (matchers map[string][]string, rules []caddyRule) {
	matchers = map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch {
		case strings.HasPrefix(f[0], "@") && len(f) > 2 && f[1] == "path":
			matchers[f[0]] = append(matchers[f[0]], f[2:]...)
		case f[0] == "reverse_proxy" && len(f) > 1:
			r := caddyRule{upstream: f[1]}
			if strings.HasPrefix(f[1], "@") && len(f) > 2 {
				r.matcher, r.upstream = f[1], f[2]
			}
			rules = append(rules, r)
		}
	}
	return matchers, rules
}

// caddyPathMatch follows Caddy's path matcher: exact, prefix (trailing *),
// suffix (leading *), or a glob with * in the middle.
func caddyPathMatch(pattern, p string) bool {
	switch {
	case !strings.Contains(pattern, "*"):
		return pattern == p
	case strings.HasSuffix(pattern, "*") && strings.Count(pattern, "*") == 1:
		return strings.HasPrefix(p, strings.TrimSuffix(pattern, "*"))
	case strings.HasPrefix(pattern, "*") && strings.Count(pattern, "*") == 1:
		return strings.HasSuffix(p, strings.TrimPrefix(pattern, "*"))
	default:
		ok, _ := path.Match(pattern, p)
		return ok
	}
}

func caddyRoute(matchers map[string][]string, rules []caddyRule, p string) string {
	for _, r := range rules {
		if r.matcher == "" {
			return r.upstream
		}
		for _, pat := range matchers[r.matcher] {
			if caddyPathMatch(pat, p) {
				return r.upstream
			}
		}
	}
	return ""
}

func TestFrontDoorRoutes(t *testing.T) {
	doc, _ := loadCompose(t)
	names := servicesWithImage(doc, "caddy:")
	if len(names) == 0 {
		t.Fatal("docker-compose.yml has no caddy front door: every /v1 route must be reachable on one port")
	}
	s := doc.Services[names[0]]
	file, ok := hostPath(s, "/etc/caddy/Caddyfile")
	if !ok {
		t.Fatal("caddy: /etc/caddy/Caddyfile is not mounted from this directory")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "route {") {
		t.Error("the reverse_proxy rules must sit in a route block: Caddy would otherwise reorder them")
	}
	matchers, rules := parseCaddyfile(string(data))
	for _, r := range rules {
		host, port, err := net.SplitHostPort(r.upstream)
		if err != nil {
			t.Errorf("upstream %q: %v", r.upstream, err)
			continue
		}
		if _, ok := doc.Services[host]; !ok {
			t.Errorf("Caddyfile proxies to %s, which is not a compose service", host)
		}
		if port != "8080" {
			t.Errorf("Caddyfile proxies to %s: Ferry services listen on 8080", r.upstream)
		}
		if r.matcher != "" && len(matchers[r.matcher]) == 0 {
			t.Errorf("matcher %s is not defined as a path matcher", r.matcher)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{"/v1/jobs", "api"},
		{"/v1/jobs/batch", "api"},
		{"/v1/jobs/0192f0c4-7a8e-7c3b-9c1e-3f1a2b3c4d5e", "api"},
		{"/v1/jobs/0192f0c4-7a8e-7c3b-9c1e-3f1a2b3c4d5e/cancel", "api"},
		{"/v1/jobs/0192f0c4-7a8e-7c3b-9c1e-3f1a2b3c4d5e/events", "sse-bridge"},
		{"/v1/events", "sse-bridge"},
		{"/v1/dlq", "dlq"},
		{"/v1/dlq/redrive", "dlq"},
		{"/v1/dlq/abc/suppress", "dlq"},
		{"/v1/audit/events", "audit"},
		{"/v1/audit/export", "audit"},
		{"/v1/audit/verify", "audit"},
		{"/v1/webhooks", "webhooks"},
		{"/v1/webhooks/abc/deliveries", "webhooks"},
		{"/v1/admin/tenants", "api"},
		{"/v1/admin/keys/k1", "api"},
		{"/v1/queues", "scheduler"},
		{"/v1/queues/default/pause", "scheduler"},
		{"/healthz", ""},
	} {
		got := caddyRoute(matchers, rules, tc.path)
		host, _, _ := net.SplitHostPort(got)
		if host != tc.want {
			t.Errorf("%s is routed to %q, want %q", tc.path, host, tc.want)
		}
	}
}
