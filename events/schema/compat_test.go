package schema

import (
	"encoding"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The compatibility check describes the JSON a Go type encodes to as a flat
// set of field paths, each with a JSON type and whether it is optional:
//
//	"job_id"            string
//	"job.timeout"       string(duration), optional
//	"history"           array, optional
//	"history[]"         object
//	"history[].attempt" integer
//
// Types are the JSON Schema types, refined for strings Ferry gives a format
// to: string(date-time) for time.Time and string(duration) for Duration;
// "any" is arbitrary JSON (json.RawMessage). A field that Go may encode as
// null gets "|null". Optional means the key may be absent from its object
// (omitempty/omitzero on a type that can be empty); a required key is
// always present when its parent object is.
//
// testdata/compat/<ce_type>.fields.json holds the committed description of
// each record type. Against it, the current Go types may only gain optional
// fields; against the JSON Schema, they must agree exactly.

type fieldInfo struct {
	Type     string
	Optional bool
}

const optionalSuffix = ", optional"

func (f fieldInfo) String() string {
	if f.Optional {
		return f.Type + optionalSuffix
	}
	return f.Type
}

func parseFieldInfo(s string) fieldInfo {
	t, opt := strings.CutSuffix(s, optionalSuffix)
	return fieldInfo{Type: t, Optional: opt}
}

// fieldSet maps a field path to its description.
type fieldSet map[string]fieldInfo

func joinPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// parentPath returns the path of the object or array holding path, "" at
// the top level.
func parentPath(path string) string {
	if p, ok := strings.CutSuffix(path, "[]"); ok {
		return p
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[Duration]()
	rawType      = reflect.TypeFor[json.RawMessage]()
)

// goFields describes the JSON encoding of struct type t as encoding/json
// produces it: json tags, embedded structs promoted, unexported fields
// skipped.
func goFields(t reflect.Type) (fieldSet, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s is not a struct", t)
	}
	fs := fieldSet{}
	if err := walkStruct(fs, "", t, map[reflect.Type]bool{}); err != nil {
		return nil, err
	}
	return fs, nil
}

func walkStruct(fs fieldSet, prefix string, t reflect.Type, seen map[reflect.Type]bool) error {
	if seen[t] {
		return fmt.Errorf("%s: recursive type %s is not supported", prefix, t)
	}
	seen[t] = true
	defer delete(seen, t)
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			switch {
			case f.Type.Kind() == reflect.Struct:
				// Promoted fields, as encoding/json does.
				if err := walkStruct(fs, prefix, f.Type, seen); err != nil {
					return err
				}
				continue
			case f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct:
				return fmt.Errorf("%s: embedded pointer %s: its fields vanish when it is nil; the checker does not model that", t, f.Type)
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		path := joinPath(prefix, name)
		if _, dup := fs[path]; dup {
			return fmt.Errorf("%s: JSON name %q is used twice; encoding/json would hide one", t, path)
		}
		typ, err := jsonTypeOf(fs, path, f.Type, hasOpt(opts, "string"), seen)
		if err != nil {
			return err
		}
		optional := hasOpt(opts, "omitzero") || (hasOpt(opts, "omitempty") && emptyable(f.Type))
		if !optional && nullable(f.Type) {
			typ += "|null"
		}
		fs[path] = fieldInfo{Type: typ, Optional: optional}
	}
	return nil
}

func hasOpt(opts, opt string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// emptyable reports whether omitempty can omit a value of type t
// (it never omits a struct, time.Time included).
func emptyable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Struct:
		return false
	case reflect.Array:
		return t.Len() == 0
	}
	return true
}

// nullable reports whether a value of type t may encode as null.
func nullable(t reflect.Type) bool {
	if t == rawType {
		return false // its type is "any", which includes null
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		return true
	}
	return false
}

// jsonTypeOf returns the JSON type of values of type t at path, adding the
// fields of nested objects and arrays to fs.
func jsonTypeOf(fs fieldSet, path string, t reflect.Type, asString bool, seen map[reflect.Type]bool) (string, error) {
	switch t {
	case timeType:
		return "string(date-time)", nil
	case durationType:
		return "string(duration)", nil
	case rawType:
		return "any", nil
	}
	if t.Kind() == reflect.Pointer {
		return jsonTypeOf(fs, path, t.Elem(), asString, seen)
	}
	marshaler := reflect.TypeFor[json.Marshaler]()
	textMarshaler := reflect.TypeFor[encoding.TextMarshaler]()
	if t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) ||
		t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
		return "", fmt.Errorf("%s: %s has its own JSON encoding; teach jsonTypeOf its JSON type", path, t)
	}
	switch t.Kind() {
	case reflect.String:
		return "string", nil
	case reflect.Bool:
		if asString {
			return "string", nil
		}
		return "boolean", nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if asString {
			return "string", nil
		}
		return "integer", nil
	case reflect.Float32, reflect.Float64:
		if asString {
			return "string", nil
		}
		return "number", nil
	case reflect.Struct:
		return "object", walkStruct(fs, path, t, seen)
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return "string(base64)", nil
		}
		return "array", addElem(fs, path+"[]", t.Elem(), seen)
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return "", fmt.Errorf("%s: map key %s is not a string", path, t.Key())
		}
		return "object", addElem(fs, path+"{}", t.Elem(), seen)
	case reflect.Interface:
		return "any", nil
	}
	return "", fmt.Errorf("%s: %s (kind %s) has no JSON encoding", path, t, t.Kind())
}

func addElem(fs fieldSet, path string, t reflect.Type, seen map[reflect.Type]bool) error {
	typ, err := jsonTypeOf(fs, path, t, false, seen)
	if err != nil {
		return err
	}
	if nullable(t) {
		typ += "|null"
	}
	fs[path] = fieldInfo{Type: typ}
	return nil
}

// nextVersion returns the CloudEvents type of the next version of ceType.
func nextVersion(ceType string) string {
	m := regexp.MustCompile(`^(.*)\.v([0-9]+)$`).FindStringSubmatch(ceType)
	if m == nil {
		return ceType + ".v2"
	}
	var n int
	fmt.Sscan(m[2], &n)
	return fmt.Sprintf("%s.v%d", m[1], n+1)
}

// compareSnapshot compares the current description of a type with its
// committed snapshot. breaking lists changes that break consumers or
// records already in the log; added lists new optional fields.
func compareSnapshot(old, cur fieldSet) (breaking, added []string) {
	for _, p := range slices.Sorted(maps.Keys(old)) {
		o := old[p]
		c, ok := cur[p]
		switch {
		case !ok:
			breaking = append(breaking, fmt.Sprintf("field %q (%s) was removed or renamed", p, o))
		case c.Type != o.Type:
			breaking = append(breaking, fmt.Sprintf("field %q changed type from %s to %s", p, o.Type, c.Type))
		case o.Optional && !c.Optional:
			breaking = append(breaking, fmt.Sprintf("field %q became required (lost omitempty): records already in the log may lack it", p))
		case !o.Optional && c.Optional:
			breaking = append(breaking, fmt.Sprintf("field %q became optional (omitempty): consumers rely on it always being present", p))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(cur)) {
		if _, ok := old[p]; ok {
			continue
		}
		// A new field is compatible if the outermost new object holding it
		// (or the field itself) is optional: records already in the log
		// lack it, and that is exactly what optional allows.
		top := p
		for q := parentPath(p); q != "" && !inSet(old, q); q = parentPath(q) {
			top = q
		}
		if cur[top].Optional || strings.HasSuffix(top, "[]") || strings.HasSuffix(top, "{}") {
			added = append(added, fmt.Sprintf("field %q (%s)", p, cur[p]))
		} else {
			breaking = append(breaking, fmt.Sprintf("new field %q (%s) is required: records already in the log lack it; make it optional (omitempty)", p, cur[p]))
		}
	}
	return breaking, added
}

func inSet(fs fieldSet, p string) bool { _, ok := fs[p]; return ok }

// snapshotFile is the form of testdata/compat/<ce_type>.fields.json.
type snapshotFile struct {
	CEType string            `json:"ce_type"`
	GoType string            `json:"go_type"`
	Fields map[string]string `json:"fields"`
}

func snapshotPath(ceType string) string {
	return filepath.Join("testdata", "compat", ceType+".fields.json")
}

func readSnapshot(ceType string) (fieldSet, error) {
	b, err := os.ReadFile(snapshotPath(ceType))
	if err != nil {
		return nil, err
	}
	var f snapshotFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", snapshotPath(ceType), err)
	}
	if f.CEType != ceType {
		return nil, fmt.Errorf("%s: ce_type %q", snapshotPath(ceType), f.CEType)
	}
	fs := fieldSet{}
	for p, s := range f.Fields {
		fs[p] = parseFieldInfo(s)
	}
	return fs, nil
}

func writeSnapshot(ceType string, t reflect.Type, fs fieldSet) error {
	f := snapshotFile{CEType: ceType, GoType: t.String(), Fields: map[string]string{}}
	for p, fi := range fs {
		f.Fields[p] = fi.String()
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(snapshotPath(ceType)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(snapshotPath(ceType), append(b, '\n'), 0o644)
}

// TestCompat fails when a record type changed incompatibly since its
// snapshot was committed.
func TestCompat(t *testing.T) {
	for _, rt := range recordTypes() {
		t.Run(rt.ceType, func(t *testing.T) {
			typ := reflect.TypeOf(rt.example)
			cur, err := goFields(typ)
			if err != nil {
				t.Fatal(err)
			}
			old, err := readSnapshot(rt.ceType)
			if os.IsNotExist(err) && *update {
				old = cur
			} else if err != nil {
				t.Fatalf("%v\nA new record type needs a snapshot: go test -run TestCompat -update", err)
			}
			breaking, added := compareSnapshot(old, cur)
			if len(breaking) > 0 {
				t.Fatalf("%s (%s) changed incompatibly since %s:\n  - %s\n"+
					"Records already in Kafka and consumers built against %s depend on these fields. "+
					"Do not change the v1 type: add a new event version (%s) with its own type, schema, golden record and snapshot instead. "+
					"(-update does not accept incompatible changes.)",
					rt.ceType, typ, snapshotPath(rt.ceType), strings.Join(breaking, "\n  - "),
					rt.ceType, nextVersion(rt.ceType))
			}
			if *update {
				if err := writeSnapshot(rt.ceType, typ, cur); err != nil {
					t.Fatal(err)
				}
			} else if len(added) > 0 {
				t.Logf("%s gained optional field(s) that are compatible but not yet in %s:\n  - %s\n"+
					"Record them so later changes are checked against them: go test -run TestCompat -update",
					rt.ceType, snapshotPath(rt.ceType), strings.Join(added, "\n  - "))
			}
		})
	}
}

// schemaFields describes the objects of a JSON Schema in the form goFields
// uses. It understands the subset of JSON Schema the files under schemas/
// use: type (a name or a list), properties, required, items, format, and
// $ref to #/$defs/<name>, where #/$defs/duration is a Go duration string.
func schemaFields(doc map[string]any) (fieldSet, error) {
	w := schemaWalker{defs: map[string]any{}}
	if d, ok := doc["$defs"].(map[string]any); ok {
		w.defs = d
	}
	fs := fieldSet{}
	if err := w.object(fs, "", doc); err != nil {
		return nil, err
	}
	return fs, nil
}

type schemaWalker struct{ defs map[string]any }

// resolve follows $ref; it returns the schema and the name of the last
// definition referred to.
func (w schemaWalker) resolve(s map[string]any) (map[string]any, string, error) {
	var name string
	for range 10 {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s, name, nil
		}
		n, ok := strings.CutPrefix(ref, "#/$defs/")
		if !ok {
			return nil, "", fmt.Errorf("$ref %q: only #/$defs/… is supported", ref)
		}
		d, ok := w.defs[n].(map[string]any)
		if !ok {
			return nil, "", fmt.Errorf("$ref %q: no such definition", ref)
		}
		s, name = d, n
	}
	return nil, "", fmt.Errorf("$ref chain too long")
}

func (w schemaWalker) object(fs fieldSet, prefix string, s map[string]any) error {
	props, _ := s["properties"].(map[string]any)
	required := map[string]bool{}
	reqList, _ := s["required"].([]any)
	for _, r := range reqList {
		name, _ := r.(string)
		required[name] = true
		if _, ok := props[name]; !ok {
			// Record it so the comparison reports it.
			fs[joinPath(prefix, name)] = fieldInfo{Type: "(required but not described)"}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(props)) {
		ps, ok := props[name].(map[string]any)
		if !ok {
			return fmt.Errorf("%s: property schema is not an object", joinPath(prefix, name))
		}
		path := joinPath(prefix, name)
		typ, err := w.typeOf(fs, path, ps)
		if err != nil {
			return err
		}
		fs[path] = fieldInfo{Type: typ, Optional: !required[name]}
	}
	return nil
}

func (w schemaWalker) typeOf(fs fieldSet, path string, s map[string]any) (string, error) {
	s, def, err := w.resolve(s)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	var types []string
	switch t := s["type"].(type) {
	case nil:
		return "any", nil
	case string:
		types = []string{t}
	case []any:
		for _, v := range t {
			name, _ := v.(string)
			types = append(types, name)
		}
	default:
		return "", fmt.Errorf("%s: type %v", path, t)
	}
	// Non-null types first, in the schema's order, then null.
	slices.SortStableFunc(types, func(a, b string) int {
		switch {
		case a == "null" && b != "null":
			return 1
		case a != "null" && b == "null":
			return -1
		}
		return 0
	})
	for i, typ := range types {
		switch typ {
		case "string":
			if def == "duration" {
				types[i] = "string(duration)"
			} else if f, ok := s["format"].(string); ok {
				types[i] = "string(" + f + ")"
			} else if e, ok := s["contentEncoding"].(string); ok {
				types[i] = "string(" + e + ")"
			}
		case "object":
			if err := w.object(fs, path, s); err != nil {
				return "", err
			}
		case "array":
			items, ok := s["items"].(map[string]any)
			if !ok {
				return "", fmt.Errorf("%s: array without an items schema", path)
			}
			et, err := w.typeOf(fs, path+"[]", items)
			if err != nil {
				return "", err
			}
			fs[path+"[]"] = fieldInfo{Type: et}
		}
	}
	return strings.Join(types, "|"), nil
}

// diffSchema lists the disagreements between what Go encodes and what the
// schema says: every Go field must be a schema property of the same type,
// required exactly when Go always emits it, and the schema must neither
// describe nor require fields Go does not have.
func diffSchema(goFS, schFS fieldSet) []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(goFS)) {
		g := goFS[p]
		s, ok := schFS[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("Go field %q (%s) is missing from the schema", p, g))
		case g.Type != s.Type:
			out = append(out, fmt.Sprintf("%q: Go encodes %s, the schema says %s", p, g.Type, s.Type))
		case !g.Optional && s.Optional:
			out = append(out, fmt.Sprintf("%q is always emitted by Go (no omitempty) but the schema does not require it", p))
		case g.Optional && !s.Optional:
			out = append(out, fmt.Sprintf("%q is required by the schema but Go omits it when empty (omitempty)", p))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(schFS)) {
		if _, ok := goFS[p]; ok {
			continue
		}
		if schFS[p].Optional {
			out = append(out, fmt.Sprintf("the schema describes %q, which the Go type does not have", p))
		} else {
			out = append(out, fmt.Sprintf("the schema requires %q, which the Go type does not have", p))
		}
	}
	return out
}

// TestSchemaMatchesGoTypes checks every JSON Schema against its Go type.
func TestSchemaMatchesGoTypes(t *testing.T) {
	for _, rt := range recordTypes() {
		t.Run(rt.ceType, func(t *testing.T) {
			goFS, err := goFields(reflect.TypeOf(rt.example))
			if err != nil {
				t.Fatal(err)
			}
			schFS, err := schemaFields(schemaDoc(t, rt.ceType))
			if err != nil {
				t.Fatal(err)
			}
			if diffs := diffSchema(goFS, schFS); len(diffs) > 0 {
				t.Errorf("schemas/%s.json disagrees with %T:\n  - %s", rt.ceType, rt.example, strings.Join(diffs, "\n  - "))
			}
			if _, isLifecycle := rt.example.(Lifecycle); isLifecycle || rt.ceType == CETypeDispatch {
				for _, f := range []string{"job_id", "tenant_id", "attempt"} {
					if fi, ok := schFS[f]; !ok || fi.Optional {
						t.Errorf("%s: every job event carries %q; the schema must require it", rt.ceType, f)
					}
				}
			}
		})
	}
}

// TestGoFieldsDescribesEncoding pins what goFields derives for a few
// fields, so that a defect in the walker cannot slip into the snapshots.
func TestGoFieldsDescribesEncoding(t *testing.T) {
	want := map[reflect.Type]map[string]string{
		reflect.TypeFor[Enqueued](): {
			"job_id":               "string",
			"tenant_id":            "string",
			"attempt":              "integer",
			"job":                  "object",
			"job.priority":         "integer",
			"job.payload":          "any, optional",
			"job.timeout":          "string(duration), optional",
			"job.not_after":        "string(date-time), optional",
			"job.tags":             "array, optional",
			"job.tags[]":           "string",
			"job.backoff":          "object, optional",
			"job.backoff.max":      "string(duration), optional",
			"created_at":           "string(date-time)",
			"history":              "array, optional",
			"history[]":            "object",
			"history[].attempt":    "integer",
			"history[].class":      "string, optional",
			"history[].started_at": "string(date-time), optional",
		},
		reflect.TypeFor[DeadLettered](): {
			"history": "array|null",
			"error":   "object",
		},
		reflect.TypeFor[Progress](): {
			"percent": "number",
		},
		reflect.TypeFor[WorkerStatus](): {
			"stopping":              "boolean, optional",
			"handed_back[].job_id":  "string",
			"handed_back[].attempt": "integer",
		},
	}
	for typ, fields := range want {
		fs, err := goFields(typ)
		if err != nil {
			t.Fatal(err)
		}
		for p, w := range fields {
			if got, ok := fs[p]; !ok || got.String() != w {
				t.Errorf("%s: %q = %q (present %v), want %q", typ, p, got, ok, w)
			}
		}
	}
	ws, _ := goFields(reflect.TypeFor[WorkerStatus]())
	if _, ok := ws["job_id"]; ok {
		t.Error("WorkerStatus has no top-level job_id")
	}
}

// Versions of a record type, as a developer might edit it, for the tests of
// the checker itself.
type (
	compatV1 struct {
		JobRef
		Name     string    `json:"name"`
		Count    int       `json:"count"`
		Note     string    `json:"note,omitempty"`
		At       time.Time `json:"at"`
		Limit    Duration  `json:"limit,omitempty"`
		Internal string    `json:"-"`
	}
	compatRemoved struct { // Count deleted
		JobRef
		Name  string    `json:"name"`
		Note  string    `json:"note,omitempty"`
		At    time.Time `json:"at"`
		Limit Duration  `json:"limit,omitempty"`
	}
	compatRenamed struct { // name → display_name
		JobRef
		Name  string    `json:"display_name"`
		Count int       `json:"count"`
		Note  string    `json:"note,omitempty"`
		At    time.Time `json:"at"`
		Limit Duration  `json:"limit,omitempty"`
	}
	compatRetyped struct { // count int → string, limit Duration → int64, at time → Unix seconds
		JobRef
		Name  string `json:"name"`
		Count string `json:"count"`
		Note  string `json:"note,omitempty"`
		At    int64  `json:"at"`
		Limit int64  `json:"limit,omitempty"`
	}
	compatNoJobRef struct { // embedded JobRef dropped
		Name  string    `json:"name"`
		Count int       `json:"count"`
		Note  string    `json:"note,omitempty"`
		At    time.Time `json:"at"`
		Limit Duration  `json:"limit,omitempty"`
	}
	compatOptionality struct { // note loses omitempty, count gains it
		JobRef
		Name  string    `json:"name"`
		Count int       `json:"count,omitempty"`
		Note  string    `json:"note"`
		At    time.Time `json:"at"`
		Limit Duration  `json:"limit,omitempty"`
	}
	compatAdded struct { // new optional fields, nested ones included
		JobRef
		Name   string    `json:"name"`
		Count  int       `json:"count"`
		Note   string    `json:"note,omitempty"`
		At     time.Time `json:"at"`
		Limit  Duration  `json:"limit,omitempty"`
		Labels []string  `json:"labels,omitempty"`
		Owner  *struct {
			ID string `json:"id"`
		} `json:"owner,omitempty"`
	}
	compatAddedRequired struct { // new field without omitempty
		JobRef
		Name   string    `json:"name"`
		Count  int       `json:"count"`
		Note   string    `json:"note,omitempty"`
		At     time.Time `json:"at"`
		Limit  Duration  `json:"limit,omitempty"`
		Region string    `json:"region"`
	}
	compatStructOmitempty struct { // omitempty on a struct never omits it
		JobRef
		Name  string    `json:"name"`
		Count int       `json:"count"`
		Note  string    `json:"note,omitempty"`
		At    time.Time `json:"at,omitempty"`
		Limit Duration  `json:"limit,omitempty"`
	}
)

func mustFields(t *testing.T, typ reflect.Type) fieldSet {
	t.Helper()
	fs, err := goFields(typ)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestCompatCheckerDetectsBreakingChanges proves the checker fails on the
// changes it exists to catch, and lets compatible ones through.
func TestCompatCheckerDetectsBreakingChanges(t *testing.T) {
	v1 := mustFields(t, reflect.TypeFor[compatV1]())
	for _, tc := range []struct {
		name      string
		cur       reflect.Type
		breaking  []string // substrings, one per expected breaking change
		additions int
	}{
		{"unchanged", reflect.TypeFor[compatV1](), nil, 0},
		{"removed field", reflect.TypeFor[compatRemoved](), []string{`"count" (integer) was removed`}, 0},
		{"renamed field", reflect.TypeFor[compatRenamed](), []string{`"name" (string) was removed or renamed`, `new field "display_name" (string) is required`}, 0},
		{"changed types", reflect.TypeFor[compatRetyped](), []string{
			`"at" changed type from string(date-time) to integer`,
			`"count" changed type from integer to string`,
			`"limit" changed type from string(duration) to integer`,
		}, 0},
		{"embedded JobRef dropped", reflect.TypeFor[compatNoJobRef](), []string{`"attempt" (integer) was removed`, `"job_id" (string) was removed`, `"tenant_id" (string) was removed`}, 0},
		{"optionality", reflect.TypeFor[compatOptionality](), []string{`"count" became optional`, `"note" became required`}, 0},
		{"added optional", reflect.TypeFor[compatAdded](), nil, 4}, // labels, labels[], owner, owner.id
		{"added required", reflect.TypeFor[compatAddedRequired](), []string{`new field "region" (string) is required`}, 0},
		{"struct omitempty", reflect.TypeFor[compatStructOmitempty](), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			breaking, added := compareSnapshot(v1, mustFields(t, tc.cur))
			if len(breaking) != len(tc.breaking) {
				t.Fatalf("breaking = %q, want %d matching %q", breaking, len(tc.breaking), tc.breaking)
			}
			for i, want := range tc.breaking {
				if !strings.Contains(breaking[i], want) {
					t.Errorf("breaking[%d] = %q, want it to mention %q", i, breaking[i], want)
				}
			}
			if len(added) != tc.additions {
				t.Errorf("added = %q, want %d", added, tc.additions)
			}
		})
	}
}

// TestCompatCheckerOnModifiedSnapshot feeds the checker in-memory edits of
// a real committed snapshot.
func TestCompatCheckerOnModifiedSnapshot(t *testing.T) {
	ce := EventEnqueued.CEType()
	snap, err := readSnapshot(ce)
	if err != nil {
		t.Fatal(err)
	}
	cur := mustFields(t, reflect.TypeFor[Enqueued]())
	if b, a := compareSnapshot(snap, cur); len(b) > 0 || len(a) > 0 {
		t.Fatalf("committed snapshot differs from the code: breaking %q, added %q", b, a)
	}

	// The snapshot has a field the code no longer has: it was removed.
	removed := maps.Clone(snap)
	removed["job.priority_class"] = fieldInfo{Type: "string"}
	if b, _ := compareSnapshot(removed, cur); len(b) != 1 || !strings.Contains(b[0], `"job.priority_class" (string) was removed or renamed`) {
		t.Errorf("removed field: breaking = %q", b)
	}
	// The code no longer has a field the snapshot has.
	lost := maps.Clone(cur)
	delete(lost, "run_at")
	if b, _ := compareSnapshot(snap, lost); len(b) != 1 || !strings.Contains(b[0], `"run_at"`) {
		t.Errorf("field deleted from the code: breaking = %q", b)
	}
	// A type differs from the snapshot.
	retyped := maps.Clone(snap)
	retyped["attempt"] = fieldInfo{Type: "string"}
	retyped["job.timeout"] = fieldInfo{Type: "integer", Optional: true}
	if b, _ := compareSnapshot(retyped, cur); len(b) != 2 ||
		!strings.Contains(b[0], `"attempt" changed type from string to integer`) ||
		!strings.Contains(b[1], `"job.timeout" changed type from integer to string(duration)`) {
		t.Errorf("changed types: breaking = %q", b)
	}
	// A field is new in the code: compatible, reported as an addition.
	older := maps.Clone(snap)
	delete(older, "actor")
	if b, a := compareSnapshot(older, cur); len(b) != 0 || len(a) != 1 || !strings.Contains(a[0], `"actor"`) {
		t.Errorf("added optional field: breaking %q, added %q", b, a)
	}
	// The snapshot file form round-trips.
	if got := parseFieldInfo(fieldInfo{Type: "string(duration)", Optional: true}.String()); got != (fieldInfo{"string(duration)", true}) {
		t.Errorf("parseFieldInfo = %+v", got)
	}
}

// TestSchemaCheckerDetectsMismatches proves diffSchema catches a schema
// that drifts from the Go type.
func TestSchemaCheckerDetectsMismatches(t *testing.T) {
	ce := EventEnqueued.CEType()
	goFS := mustFields(t, reflect.TypeFor[Enqueued]())
	check := func(name string, edit func(doc map[string]any), want ...string) {
		t.Helper()
		doc := schemaDoc(t, ce)
		edit(doc)
		schFS, err := schemaFields(doc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		diffs := diffSchema(goFS, schFS)
		if len(diffs) != len(want) {
			t.Errorf("%s: diffs = %q, want %d", name, diffs, len(want))
			return
		}
		for i, w := range want {
			if !strings.Contains(diffs[i], w) {
				t.Errorf("%s: diff %q, want it to mention %q", name, diffs[i], w)
			}
		}
	}
	props := func(doc map[string]any) map[string]any { return doc["properties"].(map[string]any) }
	jobSpec := func(doc map[string]any) map[string]any {
		return doc["$defs"].(map[string]any)["jobSpec"].(map[string]any)
	}
	removeRequired := func(doc map[string]any, name string) {
		req := doc["required"].([]any)
		doc["required"] = slices.DeleteFunc(slices.Clone(req), func(v any) bool { return v == name })
	}

	check("unchanged", func(map[string]any) {})
	check("attempt not required", func(d map[string]any) { removeRequired(d, "attempt") },
		`"attempt" is always emitted by Go (no omitempty) but the schema does not require it`)
	check("requires a field Go lacks", func(d map[string]any) { d["required"] = append(d["required"].([]any), "bogus") },
		`the schema requires "bogus", which the Go type does not have`)
	check("requires an omitempty field", func(d map[string]any) { d["required"] = append(d["required"].([]any), "actor") },
		`"actor" is required by the schema but Go omits it when empty`)
	check("wrong type", func(d map[string]any) { props(d)["created_at"] = map[string]any{"type": "integer"} },
		`"created_at": Go encodes string(date-time), the schema says integer`)
	check("duration as a number", func(d map[string]any) {
		props(jobSpec(d))["timeout"] = map[string]any{"type": "integer"}
	}, `"job.timeout": Go encodes string(duration), the schema says integer`)
	check("property missing", func(d map[string]any) { delete(props(d), "request_hash") },
		`Go field "request_hash" (string, optional) is missing from the schema`)
	check("nested required missing", func(d map[string]any) {
		js := jobSpec(d)
		js["required"] = slices.DeleteFunc(slices.Clone(js["required"].([]any)), func(v any) bool { return v == "pool" })
	}, `"job.pool" is always emitted by Go`)
	check("extra property", func(d map[string]any) { props(d)["legacy"] = map[string]any{"type": "string"} },
		`the schema describes "legacy"`)
}

func TestNextVersion(t *testing.T) {
	for in, want := range map[string]string{
		"ferry.job.completed.v1":  "ferry.job.completed.v2",
		"ferry.worker.status.v9":  "ferry.worker.status.v10",
		"ferry.job.completed.v12": "ferry.job.completed.v13",
	} {
		if got := nextVersion(in); got != want {
			t.Errorf("nextVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
