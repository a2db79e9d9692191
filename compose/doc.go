// Package compose holds Ferry's deployment files and the tests that keep
// them correct. It has no code of its own: it is a module of the workspace so
// that `go test ./...` checks the deployment along with everything else.
//
// The files:
//
//   - docker-compose.yml: a three-node KRaft Kafka cluster, Postgres, Redis,
//     every Ferry service built from its services/<name>/Dockerfile, an
//     OpenTelemetry collector, Prometheus, Grafana and a Caddy front door;
//   - Caddyfile: the front door's routes, /v1 paths to the owning service;
//   - otel-collector.yaml: OTLP in, span-derived metrics out to Prometheus;
//   - prometheus/prometheus.yml: scrapes every service's /metrics;
//   - grafana/: provisioned data source and dashboards;
//   - README.md: how to deploy and operate it.
//
// compose_test.go parses these files and fails when a Ferry service is
// missing or not built from an existing Dockerfile, when a service sets an
// environment variable that platform/config.Vars does not declare, when a
// service cannot reach all three brokers or the stores it needs, when the
// Kafka nodes do not form one replicated KRaft quorum, when Prometheus does
// not scrape a service, when the front door routes a path to the wrong
// service, or when a mounted file does not exist. configdoc_test.go keeps
// docs/configuration.md in step with config.Vars.
package compose
