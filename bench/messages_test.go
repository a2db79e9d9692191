package main

import (
	"maps"
	"strings"
	"testing"
)

// TestParseMessages reads the message counters from an exposition as the
// Prometheus exporter writes it (help and type lines, scope labels, other
// series, several samples of one key), and nothing else.
func TestParseMessages(t *testing.T) {
	const exposition = `# HELP ferry_kafka_requests_total Requests written to the Kafka brokers
# TYPE ferry_kafka_requests_total counter
ferry_kafka_requests_total{api="Fetch",client="ferry-scheduler",otel_scope_name="ferry/kafkax",otel_scope_version=""} 1234
ferry_kafka_requests_total{api="Produce",client="ferry-api"} 1.5e+06
# TYPE ferry_kafka_request_bytes_total counter
ferry_kafka_request_bytes_total{api="Fetch",client="ferry-api",direction="read"} 99
# TYPE ferry_events_decodes_total counter
ferry_events_decodes_total{kind="header",otel_scope_name="ferry/kafkax"} 7
ferry_events_decodes_total{kind="full",otel_scope_name="ferry/kafkax"} 30
ferry_events_decodes_total{kind="full",otel_scope_name="other \"scope\""} 2
# TYPE ferry_events_encodes_total counter
ferry_events_encodes_total{otel_scope_name="ferry/kafkax"} 9
# TYPE go_goroutines gauge
go_goroutines 12
`
	got, err := parseMessages(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"kafka scheduler Fetch": 1234, "kafka api Produce": 1500000,
		"decode header": 7, "decode full": 32, "encode": 9}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := parseMessages(strings.NewReader("ferry_events_encodes_total{ 9\n")); err == nil {
		t.Fatal("a malformed exposition parsed")
	}
}
