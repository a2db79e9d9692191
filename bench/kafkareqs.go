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

// kafkaRequestsSeries is the Prometheus name of kafkax.RequestsMetric on the
// stack's /metrics.
const kafkaRequestsSeries = "ferry_kafka_requests_total"

var promLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// kafkaRequests reads the Kafka requests the serving process's clients made,
// keyed "client api" (e.g. "ferry-scheduler Fetch"), from its /metrics; nil
// when they cannot be read (an older ferry, or a stack without /metrics).
func (p *Probe) kafkaRequests(ctx context.Context) map[string]int64 {
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
		if k, n, ok := parseRequestsLine(sc.Text()); ok {
			out[k] += n
		}
	}
	return out
}

// parseRequestsLine reads one sample of kafkaRequestsSeries.
func parseRequestsLine(line string) (key string, n int64, ok bool) {
	rest, found := strings.CutPrefix(line, kafkaRequestsSeries+"{")
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
	var client, api string
	for _, m := range promLabel.FindAllStringSubmatch(labels, -1) {
		switch m[1] {
		case "client":
			client = strings.TrimPrefix(m[2], "ferry-")
		case "api":
			api = m[2]
		}
	}
	return client + " " + api, int64(f), true
}

// kafkaRequestsLine formats the requests between a and b per job of f: the
// total, by kind, and the six largest client and kind pairs.
func kafkaRequestsLine(a, b map[string]int64, f float64) (string, map[string]int64) {
	if b == nil {
		return "", nil
	}
	delta, total := countDeltas(a, b)
	byAPI := map[string]int64{}
	for k, n := range delta {
		_, api, _ := strings.Cut(k, " ")
		byAPI[api] += n
	}
	return fmt.Sprintf("kafka requests %.2f (%s; by client: %s)", float64(total)/f, topPerJob(byAPI, f), topPerJob(delta, f)), delta
}
