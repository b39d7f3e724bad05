// Package strictjson decodes the JSON values keyshare stores in etcd
// strictly: one value and nothing after it, no unknown fields, no field named
// in another case, no field given twice. encoding/json alone accepts the
// last three, and a hand-edited value that says something twice should be
// refused rather than read one way.
//
//	var rec Record
//	if err := strictjson.Decode(data, &rec); err != nil { ... }
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
)

// Decode decodes data into v (a pointer to a struct) strictly.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	// A value exactly as json.Marshal writes it (every value keyshare
	// writes) names each field once, as declared: nothing is left to check.
	// The token walk below costs about ten times the decode, and every
	// member decodes every range record the group writes.
	if canon, err := json.Marshal(v); err == nil && bytes.Equal(canon, data) {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return check(d, reflect.TypeOf(v).Elem(), "")
}

// check walks the next JSON value from d against type t.
func check(d *json.Decoder, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := d.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar; its type was checked by Decode
	}
	switch delim {
	case '[':
		elem := t
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			elem = t.Elem()
		}
		for d.More() {
			if err := check(d, elem, path+"[]"); err != nil {
				return err
			}
		}
		_, err := d.Token() // ]
		return err
	case '{':
		fields := fieldsOf(t)
		seen := make(map[string]bool)
		for d.More() {
			kt, err := d.Token()
			if err != nil {
				return err
			}
			name := kt.(string)
			if seen[name] {
				return fmt.Errorf("field %q given twice%s", name, at(path))
			}
			seen[name] = true
			ft, known := fields[name]
			switch {
			case fields != nil && !known:
				return fmt.Errorf("unknown field %q%s (field names are case-sensitive)", name, at(path))
			case fields == nil && t.Kind() == reflect.Map:
				ft = t.Elem() // a key is data; the value has the map's type
			case fields == nil:
				ft = anyType // a type that decodes itself: Decode checked it
			}
			if err := check(d, ft, path+"."+name); err != nil {
				return err
			}
		}
		_, err := d.Token() // }
		return err
	}
	return nil
}

// anyType stands for the parts of a value whose type check leaves to
// encoding/json.
var anyType = reflect.TypeFor[any]()

func at(path string) string {
	if path == "" {
		return ""
	}
	return " in " + strings.TrimPrefix(path, ".")
}

// fieldCache holds fieldsOf's answer per type.
var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// fieldsOf maps the JSON names of a struct's fields to their types; nil for
// types that are not plain structs (maps, time.Time, ...). The map is
// shared: do not change it.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	f := typeFields(t)
	fieldCache.Store(t, f)
	return f
}

func typeFields(t reflect.Type) map[string]reflect.Type {
	if t.Kind() != reflect.Struct || t.Implements(reflect.TypeFor[json.Unmarshaler]()) || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return nil
	}
	out := make(map[string]reflect.Type)
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n != "" {
				name = n
			}
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for k, v := range typeFields(f.Type) {
				out[k] = v
			}
			continue
		}
		out[name] = f.Type
	}
	return out
}
