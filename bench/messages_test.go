package main

import "testing"

// TestParseMessageLine reads the message counters' samples as the
// Prometheus exporter writes them, and nothing else.
func TestParseMessageLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		key  string
		n    int64
		ok   bool
	}{
		{`ferry_kafka_requests_total{api="Fetch",client="ferry-scheduler",otel_scope_name="ferry/kafkax",otel_scope_version=""} 1234`, "kafka scheduler Fetch", 1234, true},
		{`ferry_kafka_requests_total{api="Produce",client="ferry-api"} 1.5e+06`, "kafka api Produce", 1500000, true},
		{`ferry_events_decodes_total{kind="header",otel_scope_name="ferry/kafkax"} 7`, "decode header", 7, true},
		{`ferry_events_encodes_total{otel_scope_name="ferry/kafkax"} 9`, "encode", 9, true},
		{`ferry_kafka_request_bytes_total{api="Fetch",client="ferry-api",direction="read"} 99`, "", 0, false},
		{`# HELP ferry_kafka_requests_total Requests written`, "", 0, false},
		{`ferry_kafka_requests_total{api="Fetch",client="x"} NaNish`, "", 0, false},
	} {
		key, n, ok := parseMessageLine(tc.line)
		if key != tc.key || n != tc.n || ok != tc.ok {
			t.Errorf("%s: got %q %d %v, want %q %d %v", tc.line, key, n, ok, tc.key, tc.n, tc.ok)
		}
	}
}
