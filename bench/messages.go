package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The Prometheus names, on the stack's /metrics, of the serving process's
// message counters: kafkax.RequestsMetric by client and request kind, and
// the records it decoded (kafkax.DecodesMetric, by kind) and encoded.
const (
	kafkaRequestsSeries = "ferry_kafka_requests_total"
	decodesSeries       = "ferry_events_decodes_total"
	encodesSeries       = "ferry_events_encodes_total"
)

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
	out, err := parseMessages(resp.Body)
	if err != nil {
		return nil
	}
	return out
}

// parseMessages reads the message counters from a Prometheus text
// exposition (prometheus/common's parser: the format's escapes and
// number forms are its concern), summing the samples of each key.
func parseMessages(r io.Reader) (map[string]int64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if key, ok := messageKey(name, l); ok {
				out[key] += int64(m.GetCounter().GetValue())
			}
		}
	}
	return out, nil
}

// messageKey is the key of a sample of series name with labels l, false
// for a series that is not a message counter.
func messageKey(name string, l map[string]string) (string, bool) {
	switch name {
	case kafkaRequestsSeries:
		return "kafka " + strings.TrimPrefix(l["client"], "ferry-") + " " + l["api"], true
	case decodesSeries:
		return "decode " + l["kind"], true
	case encodesSeries:
		return "encode", true
	}
	return "", false
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
