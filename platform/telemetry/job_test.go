package telemetry

import (
	"context"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/ferryhq/ferry/events/schema"
)

func TestTraceParentRoundTrip(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := ContextWithTraceParent(context.Background(), tp)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() || sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("span context = %+v", sc)
	}
	if got := TraceParent(ctx); got != tp {
		t.Fatalf("TraceParent = %q, want %q", got, tp)
	}
	if TraceParent(context.Background()) != "" || ContextWithTraceParent(context.Background(), "garbage") == nil {
		t.Fatal("no span context must give no traceparent")
	}
	if sc := trace.SpanContextFromContext(ContextWithTraceParent(context.Background(), "garbage")); sc.IsValid() {
		t.Fatal("a malformed traceparent must be ignored")
	}
}

func TestJobAttrs(t *testing.T) {
	ref := schema.JobRef{JobID: "j1", TenantID: "acme", Attempt: 2}
	ctx := ContextWithTraceParent(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	got := map[string]string{}
	for _, a := range JobAttrs(ref, ctx) {
		at := a.(slog.Attr)
		got[at.Key] = at.Value.String()
	}
	want := map[string]string{"job_id": "j1", "tenant_id": "acme", "attempt": "2", "trace_id": "0af7651916cd43dd8448eb211c80319c"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if n := len(JobAttrs(ref, nil)); n != 3 {
		t.Errorf("without a trace: %d attrs, want 3", n)
	}
}
