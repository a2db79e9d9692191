package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// The Prometheus names, on the stack's /metrics, of the serving process's
// message counters: kafkax.RequestsMetric by client and request kind, and
// the records it decoded (kafkax.DecodesMetric, by kind) and encoded.
const (
	kafkaRequestsSeries = "ferry_kafka_requests_total"
	decodesSeries       = "ferry_events_decodes_total"
	encodesSeries       = "ferry_events_encodes_total"
)

var promLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// messageCounts reads the serving process's message counters from its
// /metrics, keyed "kafka <client> <api>" (e.g. "kafka scheduler Fetch"),
// "decode full", "decode header" and "encode"; nil when they cannot be
// read (an older ferry, or a stack without /metrics).
func (p *Probe) messageCounts(ctx context.Context) map[string]int64 {
	if p.metrics == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metrics, nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if k, n, ok := parseMessageLine(sc.Text()); ok {
			out[k] += n
		}
	}
	return out
}

// parseMessageLine reads one sample of the message counters.
func parseMessageLine(line string) (key string, n int64, ok bool) {
	name, rest, found := strings.Cut(line, "{")
	if !found {
		return "", 0, false
	}
	labels, value, found := strings.Cut(rest, "} ")
	if !found {
		return "", 0, false
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
	if err != nil {
		return "", 0, false
	}
	l := map[string]string{}
	for _, m := range promLabel.FindAllStringSubmatch(labels, -1) {
		l[m[1]] = m[2]
	}
	switch name {
	case kafkaRequestsSeries:
		key = "kafka " + strings.TrimPrefix(l["client"], "ferry-") + " " + l["api"]
	case decodesSeries:
		key = "decode " + l["kind"]
	case encodesSeries:
		key = "encode"
	default:
		return "", 0, false
	}
	return key, int64(f), true
}

// messagesLine formats the message counts between a and b per job of f:
// the Kafka requests (total, by kind, and the six largest client and kind
// pairs), then the records decoded and encoded.
func messagesLine(a, b map[string]int64, f float64) (string, map[string]int64) {
	if b == nil {
		return "", nil
	}
	delta, _ := countDeltas(a, b)
	var reqs int64
	byAPI, byClient := map[string]int64{}, map[string]int64{}
	for k, n := range delta {
		rest, isKafka := strings.CutPrefix(k, "kafka ")
		if !isKafka {
			continue
		}
		_, api, _ := strings.Cut(rest, " ")
		reqs += n
		byAPI[api] += n
		byClient[rest] = n
	}
	per := func(k string) float64 { return float64(delta[k]) / f }
	return fmt.Sprintf("kafka requests %.2f (%s; by client: %s); JSON decodes %.2f full + %.2f header-only, encodes %.2f",
		float64(reqs)/f, topPerJob(byAPI, f), topPerJob(byClient, f), per("decode full"), per("decode header"), per("encode")), delta
}
