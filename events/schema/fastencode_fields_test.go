package schema

import (
	"reflect"
	"testing"
	"time"
)

// The fast path writes every member of the hot types: a value with every
// field set, down through nested structs, pointers, slices and maps, is
// written as json.Marshal writes it. A field added to a hot type (or a type
// inside one) that appendHot does not write fails here, whatever the
// golden files and fuzz seeds hold.
func TestFastEncodeEveryField(t *testing.T) {
	for ceType, decode := range hotDecoders {
		zero, err := decode([]byte(`{}`))
		if err != nil {
			t.Fatalf("%s: %v", ceType, err)
		}
		v := reflect.New(reflect.TypeOf(zero)).Elem()
		fillEveryField(v, 0)
		// By value and by pointer, as the worker passes its reports.
		for _, data := range []Data{v.Interface().(Data), v.Addr().Interface().(Data)} {
			if !fastMatches(t, data) {
				t.Errorf("%T: the fast path gave up on a value with every field set", data)
			}
		}
	}
}

// A nil pointer to a hot type is json.Marshal's null, not a hot value.
func TestFastEncodeNilPointer(t *testing.T) {
	for _, data := range []Data{(*Enqueued)(nil), (*Dispatch)(nil), (*Started)(nil), (*Progress)(nil), (*Completed)(nil), (*Failed)(nil)} {
		if b, ok := fastEncode(data); ok {
			t.Errorf("%T(nil): the fast path wrote %q", data, b)
		}
	}
}

// fillEveryField sets v and everything in it to a value that is not empty,
// so omitempty leaves no member out.
func fillEveryField(v reflect.Value, depth int) {
	if depth > 8 {
		return
	}
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 11, 27, 19, 4, 5, 123456789, time.UTC)))
		return
	case v.Type() == rawType:
		v.SetBytes([]byte(`{"k": [1, "<&>"]}`))
		return
	case v.Type() == durationType:
		v.SetInt(int64(3 * time.Second))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("s<&>")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(42.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillEveryField(v.Elem(), depth+1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillEveryField(v.Index(0), depth+1)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillEveryField(k, depth+1)
		fillEveryField(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillEveryField(v.Field(i), depth+1)
			}
		}
	case reflect.Interface:
		v.Set(reflect.ValueOf("any"))
	}
}
