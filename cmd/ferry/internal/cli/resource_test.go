package cli

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/client"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/services/api"
)

// TestClientJobMirrorsTheResource: the Go client's Job, which keeps to the
// standard library, has exactly the JSON fields of the job resource the
// server defines once (jobs.Job), nested objects included, so the CLI and
// every Go caller see each field the API sends.
func TestClientJobMirrorsTheResource(t *testing.T) {
	server, mirror := jsonFields(reflect.TypeFor[jobs.Job](), ""), jsonFields(reflect.TypeFor[client.Job](), "")
	if !slices.Equal(server, mirror) {
		t.Fatalf("client.Job fields differ from jobs.Job:\n server %v\n client %v", server, mirror)
	}
	if !slices.Contains(server, "concurrency.limit") || !slices.Contains(server, "progress.percent") {
		t.Fatalf("nested fields not walked: %v", server)
	}
}

// TestClientScheduleMirrorsTheResource: the same for the schedule
// resource, which ferry schedules prints through the client.
func TestClientScheduleMirrorsTheResource(t *testing.T) {
	server, mirror := jsonFields(reflect.TypeFor[api.Schedule](), ""), jsonFields(reflect.TypeFor[client.Schedule](), "")
	if !slices.Equal(server, mirror) {
		t.Fatalf("client.Schedule fields differ from api.Schedule:\n server %v\n client %v", server, mirror)
	}
}

// jsonFields lists the JSON names of struct type t's fields, sorted, with
// the fields of nested objects as "parent.child".
func jsonFields(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			// encoding/json promotes an embedded struct's fields.
			out = append(out, jsonFields(f.Type, prefix)...)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		out = append(out, prefix+name)
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() {
			out = append(out, jsonFields(ft, prefix+name+".")...)
		}
	}
	slices.Sort(out)
	return out
}
