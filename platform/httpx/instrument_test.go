package httpx

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// instrumented installs recording providers for the test and returns a
// router built by NewRouter (so with instrument) with the routes of the
// test, served over real HTTP.
func instrumented(t *testing.T) (*httptest.Server, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	prevT, prevM, prevP := otel.GetTracerProvider(), otel.GetMeterProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(prevT); otel.SetMeterProvider(prevM); otel.SetTextMapPropagator(prevP) })

	r := NewRouter(nil, nil)
	r.Route("/v1/things", func(r chi.Router) {
		r.Post("/{id}", func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			WriteJSON(w, http.StatusAccepted, map[string]int{"read": len(body)})
		})
		r.Get("/{id}/stream", func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
				http.Error(w, "no write deadline through the wrapper: "+err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: one\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		})
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv, spans, reader
}

// TestInstrumentSpansAndMetrics: a request continues the caller's trace in
// a server span named by its route (not its path), with its status; the
// three server histograms get one point per request, with the route,
// method and status as attributes and the body sizes read and written; a
// stream still flushes and sets write deadlines through the wrapper.
func TestInstrumentSpansAndMetrics(t *testing.T) {
	srv, spans, reader := instrumented(t)
	parent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/things/job_1", strings.NewReader(`{"a":1}`))
	req.Header.Set("traceparent", parent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %d %s", resp.StatusCode, answer)
	}
	if _, err := http.Get(srv.URL + "/nowhere"); err != nil {
		t.Fatal(err)
	}

	ended := spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want 2", len(ended))
	}
	s := ended[0]
	if s.Name() != "POST /v1/things/{id}" || s.SpanKind() != trace.SpanKindServer {
		t.Fatalf("span %q kind %v", s.Name(), s.SpanKind())
	}
	if name := ended[1].Name(); name != "GET" { // no route matched: the method alone
		t.Fatalf("the unrouted request's span is %q", name)
	}
	if s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("span's parent %v, want the traceparent's", s.Parent())
	}
	if got := attrOf(s.Attributes(), "http.response.status_code"); got != "202" {
		t.Fatalf("span status code %q", got)
	}
	if got := attrOf(s.Attributes(), "url.path"); got != "/v1/things/job_1" {
		t.Fatalf("span url.path %q", got)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	post := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			for _, p := range points(t, m) {
				route, _ := p.attrs.Value("http.route")
				status, _ := p.attrs.Value("http.response.status_code")
				method, _ := p.attrs.Value("http.request.method")
				if _, ok := p.attrs.Value("server.address"); ok {
					t.Fatalf("%s has server.address, a client-chosen value", m.Name)
				}
				if route.AsString() == "/v1/things/{id}" && status.AsInt64() == 202 && method.AsString() == "POST" {
					if p.count != 1 {
						t.Fatalf("%s: %d points for one request", m.Name, p.count)
					}
					post[m.Name] = p.sum
				}
			}
		}
	}
	if post["http.server.request.body.size"] != 7 || post["http.server.response.body.size"] != float64(len(answer)) ||
		post["http.server.request.duration"] <= 0 {
		t.Fatalf("the POST's points: %v (answer %d bytes)", post, len(answer))
	}

	// A wrapper that lost Flush would hold the first event back until the
	// client gives up.
	stream, err := (&http.Client{Timeout: 10 * time.Second}).Get(srv.URL + "/v1/things/job_1/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	line, err := bufio.NewReader(stream.Body).ReadString('\n')
	if stream.StatusCode != http.StatusOK || line != "data: one\n" || err != nil {
		t.Fatalf("stream: %d %q %v", stream.StatusCode, line, err)
	}
}

type point struct {
	attrs attribute.Set
	count uint64
	sum   float64
}

// points are the data points of a histogram, float or integer.
func points(t *testing.T, m metricdata.Metrics) []point {
	var out []point
	switch h := m.Data.(type) {
	case metricdata.Histogram[float64]:
		for _, p := range h.DataPoints {
			out = append(out, point{p.Attributes, p.Count, p.Sum})
		}
	case metricdata.Histogram[int64]:
		for _, p := range h.DataPoints {
			out = append(out, point{p.Attributes, p.Count, float64(p.Sum)})
		}
	default:
		t.Fatalf("%s is %T", m.Name, m.Data)
	}
	return out
}

func attrOf(kvs []attribute.KeyValue, key string) string {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// TestInstrumentKeepsUnreadBodiesSafe: a handler that answers without
// reading a large body leaves net/http to deal with it as without the
// middleware: the next request on the same connection is answered
// correctly, not parsed out of the leftover body.
func TestInstrumentKeepsUnreadBodiesSafe(t *testing.T) {
	r := NewRouter(nil, nil)
	r.Post("/v1/big", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, r, Errorf(http.StatusRequestEntityTooLarge, "payload_too_large", "no"))
	})
	r.Get("/v1/small", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"ok": "yes"})
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	big := strings.Repeat("GET /v1/small HTTP/1.1\r\nHost: x\r\n\r\n", 40000) // ~1.4 MB of would-be requests
	for range 3 {
		resp, err := cl.Post(srv.URL+"/v1/big", "application/json", strings.NewReader(big))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("big POST: %d", resp.StatusCode)
		}
		resp, err = cl.Get(srv.URL + "/v1/small")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), `"ok":"yes"`) {
			t.Fatalf("the request after an unread body: %d %s", resp.StatusCode, got)
		}
	}
}
