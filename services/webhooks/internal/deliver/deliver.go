// Package deliver is the delivery loop: it claims due outbox rows, sends
// them concurrently (a bounded pool, with an in-flight cap per endpoint so
// a slow or dead endpoint never holds every slot), records each attempt and
// schedules retries.
package deliver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/outbound"
	"github.com/ferryhq/ferry/platform/secretbox"
	"github.com/ferryhq/ferry/platform/signing"
	"github.com/ferryhq/ferry/services/webhooks/internal/policy"
	"github.com/ferryhq/ferry/services/webhooks/internal/store"
)

// Config of the loop. Zero fields take their defaults: the service passes
// its own settings; a field named after an environment variable defaults as
// that variable does (platform/config.Vars).
type Config struct {
	// Concurrency bounds requests in flight (FERRY_WEBHOOKS_CONCURRENCY).
	Concurrency int
	// PerEndpoint bounds requests in flight to one endpoint
	// (FERRY_WEBHOOKS_ENDPOINT_CONCURRENCY).
	PerEndpoint int
	// Timeout bounds one request (FERRY_WEBHOOKS_TIMEOUT).
	Timeout time.Duration
	// Retry is the retry schedule.
	Retry policy.Retry
	// DisableAfter disables an endpoint failing for this long. 0: never.
	DisableAfter time.Duration
	// Poll is how often due deliveries are looked for when nothing wakes
	// the loop. Defaults to 250ms.
	Poll time.Duration
	// MaxResponseBytes bounds how much of a response is read. Defaults to 64 KiB.
	MaxResponseBytes int64
}

func (c Config) withDefaults() Config {
	config.DefaultVar(&c.Concurrency, "FERRY_WEBHOOKS_CONCURRENCY")
	config.DefaultVar(&c.PerEndpoint, "FERRY_WEBHOOKS_ENDPOINT_CONCURRENCY")
	config.DefaultVar(&c.Timeout, "FERRY_WEBHOOKS_TIMEOUT")
	config.Default(&c.Poll, 250*time.Millisecond)
	config.Default(&c.MaxResponseBytes, 64<<10)
	return c
}

// Endpoints lists the endpoints whose deliveries may be claimed.
type Endpoints interface{ IDs() []string }

// Loop sends deliveries.
type Loop struct {
	cfg     Config
	store   *store.Store
	box     *secretbox.Box
	client  *http.Client
	eps     Endpoints
	log     *slog.Logger
	now     func() time.Time
	outcome metric.Int64Counter
	latency metric.Float64Histogram
	// OnDisable is called when an attempt disables an endpoint.
	OnDisable func(endpointID, reason string)

	mu       sync.Mutex
	inflight map[string]int
	total    int
	rr       int
	wake     chan struct{}
}

// New returns a loop. client must be an SSRF-guarded outbound client.
func New(cfg Config, st *store.Store, box *secretbox.Box, client *http.Client, eps Endpoints, log *slog.Logger) *Loop {
	meter := otel.Meter("ferry/webhooks")
	outcome, _ := meter.Int64Counter("ferry.webhooks.deliveries",
		metric.WithDescription("Webhook delivery attempts by outcome: delivered, retry, failed (attempts used up), gone (410), disabled."))
	latency, _ := meter.Float64Histogram("ferry.webhooks.delivery.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of webhook delivery requests."))
	return &Loop{
		cfg: cfg.withDefaults(), store: st, box: box, client: client, eps: eps, log: log, now: time.Now,
		outcome: outcome, latency: latency, inflight: map[string]int{}, wake: make(chan struct{}, 1),
	}
}

// Wake makes the loop look for due deliveries now.
func (l *Loop) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Run sends deliveries until ctx is done, then waits for the requests in
// flight (each bounded by Timeout) and records their results.
func (l *Loop) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer l.client.CloseIdleConnections()
	defer wg.Wait()
	t := time.NewTicker(l.cfg.Poll)
	defer t.Stop()
	for {
		full, err := l.claimAndSend(ctx, &wg)
		if err != nil && ctx.Err() == nil {
			l.log.Warn("webhooks: claim deliveries", "err", err)
		}
		if full && err == nil {
			continue // there may be more due; slots free up as sends finish
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-l.wake:
		}
	}
}

// claimAndSend claims as many due deliveries as there are free slots and
// starts sending them. full reports that every free slot got one.
func (l *Loop) claimAndSend(ctx context.Context, wg *sync.WaitGroup) (full bool, err error) {
	ids := l.eps.IDs()
	l.mu.Lock()
	free := l.cfg.Concurrency - l.total
	var eps []string
	var allow []int
	if free > 0 && len(ids) > 0 {
		// Start at a rotating offset so no endpoint is always first in line.
		l.rr = (l.rr + 1) % len(ids)
		for i := range ids {
			id := ids[(l.rr+i)%len(ids)]
			if n := l.cfg.PerEndpoint - l.inflight[id]; n > 0 {
				eps, allow = append(eps, id), append(allow, n)
			}
		}
	}
	l.mu.Unlock()
	if free <= 0 || len(eps) == 0 {
		return false, nil
	}
	lease := l.cfg.Timeout + 30*time.Second
	claimed, err := l.store.Claim(ctx, eps, allow, free, lease)
	if err != nil {
		return false, err
	}
	l.mu.Lock()
	for _, c := range claimed {
		l.inflight[c.EndpointID]++
		l.total++
	}
	l.mu.Unlock()
	for _, c := range claimed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.attempt(context.WithoutCancel(ctx), c)
			l.mu.Lock()
			if l.inflight[c.EndpointID]--; l.inflight[c.EndpointID] <= 0 {
				delete(l.inflight, c.EndpointID)
			}
			l.total--
			l.mu.Unlock()
			l.Wake()
		}()
	}
	return len(claimed) == free, nil
}

// maxErrorText bounds the error text of an attempt in the delivery log.
const maxErrorText = 1024

// attempt sends one delivery and records the result. The error text quotes
// the receiver's answer and transport errors: it is made storable text
// (valid UTF-8, no NUL, bounded) here, or recording it would fail on every
// retry.
func (l *Loop) attempt(ctx context.Context, c store.Claimed) {
	start := l.now()
	code, errText, exchange := l.send(ctx, c, start)
	errText = schema.SanitizeText(errText, maxErrorText)
	res := store.Result{
		DeliveryID: c.ID, EndpointID: c.EndpointID, Attempt: c.Attempt, At: l.now(),
		StatusCode: code, Latency: l.now().Sub(start), Error: errText, DisableAfter: l.cfg.DisableAfter,
		Exchange: exchange, ReplayedBy: c.ReplayBy,
	}
	l.latency.Record(ctx, res.Latency.Seconds())
	outcome := policy.Classify(code)
	label := string(outcome)
	switch outcome {
	case policy.Delivered:
		res.Delivered = true
	case policy.Gone:
		res.Disable = "endpoint answered 410 Gone"
	default:
		// A replay is one attempt asked for by hand: when it fails, the
		// delivery fails again rather than restarting the retry schedule.
		if wait, ok := l.cfg.Retry.Next(c.Attempt); ok && c.ReplayBy == "" {
			res.NextAttempt = res.At.Add(wait)
			label = "retry"
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	disabled, err := l.store.Record(rctx, res)
	if err != nil {
		// The claim's lease expires and the delivery is retried.
		l.log.Error("webhooks: record attempt", "delivery", c.ID, "err", err)
		return
	}
	l.outcome.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", label)))
	if disabled != "" {
		l.outcome.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "disabled")))
		l.log.Warn("webhooks: endpoint disabled", "endpoint", c.EndpointID, "tenant", c.TenantID, "reason", disabled)
		if l.OnDisable != nil {
			l.OnDisable(c.EndpointID, disabled)
		}
	}
	if outcome != policy.Delivered {
		l.log.Debug("webhooks: delivery attempt failed", "delivery", c.ID, "endpoint", c.EndpointID,
			"attempt", c.Attempt, "status", code, "err", errText)
	}
}

// send makes the request, signed for at. It returns the response status
// (0 if none), an error text for anything but a 2xx, and the exchange for
// the delivery log.
func (l *Loop) send(ctx context.Context, c store.Claimed, at time.Time) (int, string, store.Exchange) {
	var ex store.Exchange
	keys, err := l.keys(c, at)
	if err != nil {
		return 0, err.Error(), ex
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(c.Body))
	if err != nil {
		return 0, "invalid url: " + err.Error(), ex
	}
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Header.Set("User-Agent", "Ferry-Webhooks/1")
	req.Header.Set(signing.HeaderID, c.ID)
	req.Header.Set(signing.HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	req.Header.Set(signing.HeaderSignature, signing.Header(keys, c.ID, at, c.Body))
	ex.RequestHeaders = loggedHeaders(req.Header)
	resp, err := l.client.Do(req)
	if err != nil {
		if errors.Is(err, outbound.ErrBlocked) {
			return 0, "blocked by the SSRF guard: " + err.Error(), ex
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Sprintf("timed out after %s", l.cfg.Timeout), ex
		}
		return 0, err.Error(), ex
	}
	body, truncated, _ := outbound.ReadBody(resp.Body, l.cfg.MaxResponseBytes)
	resp.Body.Close()
	ex.ResponseHeaders = loggedHeaders(resp.Header)
	ex.ResponseBody = schema.SanitizeText(string(body[:min(len(body), maxLoggedBody)]), 0)
	ex.ResponseTruncated = truncated || len(body) > maxLoggedBody
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, "", ex
	}
	return resp.StatusCode, "HTTP " + strconv.Itoa(resp.StatusCode) + snippet(body), ex
}

// keys opens the endpoint's signing secret and, during its grace period,
// the previous one.
func (l *Loop) keys(c store.Claimed, at time.Time) ([][]byte, error) {
	open := func(sealed []byte) ([]byte, error) {
		plain, err := l.box.Open(sealed, []byte(c.EndpointID))
		if err != nil {
			return nil, err
		}
		return signing.Key(string(plain))
	}
	cur, err := open(c.SecretEnc)
	if err != nil {
		return nil, fmt.Errorf("signing secret: %w", err)
	}
	keys := [][]byte{cur}
	if c.PrevSecretEnc != nil && c.PrevUntil != nil && at.Before(*c.PrevUntil) {
		if prev, err := open(c.PrevSecretEnc); err == nil {
			keys = append(keys, prev)
		}
	}
	return keys, nil
}

// snippet is a short, printable excerpt of a response body for the log.
func snippet(body []byte) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(body), "\uFFFD"))
	if s == "" {
		return ""
	}
	const max = 200
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return ": " + s
}
