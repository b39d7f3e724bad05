package schema_test

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/schema"
)

var updateSchema = flag.Bool("update-schema", false, "rewrite testdata/schema-v1.txt from the record types")

// storedTypes are the values this package writes to etcd, each decoded
// strictly by every member and the leader (the ledger's entry is held by
// ledger's own test).
var storedTypes = []any{
	schema.RangeRecord{}, schema.MemberInfo{}, schema.SubscriptionRecord{},
	schema.LeaveRecord{}, schema.GenerationRecord{}, schema.CommitRecord{},
	schema.StuckRecord{}, schema.LossRecord{}, schema.PauseRecord{},
	schema.HandoffPlan{}, schema.TopicRecord{}, schema.LoadReport{}, schema.HotKeyNames{}, schema.KeyOpRecord{},
}

// TestStoredSchemaIsFrozen: the JSON fields of the stored values at
// RecordVersion are those in testdata/schema-v1.txt. Every build's
// decoder refuses unknown fields, so a field added to a value under the
// same version would be refused by the members of the release before it
// while they share a group (docs/upgrades.md). New data goes into a key
// of its own; a changed value needs a new RecordVersion and a migration.
func TestStoredSchemaIsFrozen(t *testing.T) {
	if schema.RecordVersion != 1 {
		t.Fatalf("RecordVersion %d: record its schema in testdata/schema-v%d.txt and point this test at it", schema.RecordVersion, schema.RecordVersion)
	}
	var lines []string
	for _, v := range storedTypes {
		typ := reflect.TypeOf(v)
		lines = schemaLines(lines, typ.Name(), typ)
	}
	got := strings.Join(lines, "\n") + "\n"
	const file = "testdata/schema-v1.txt"
	if *updateSchema {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		var added, gone []string
		wantLines := strings.Split(strings.TrimSpace(string(want)), "\n")
		for _, l := range lines {
			if !slices.Contains(wantLines, l) {
				added = append(added, l)
			}
		}
		for _, l := range wantLines {
			if !slices.Contains(lines, l) {
				gone = append(gone, l)
			}
		}
		t.Fatalf("the stored values' fields differ from %s at version %d (added %q, gone %q): "+
			"members of the previous release refuse such values while they share a group; "+
			"put new data under a key of its own, or read docs/upgrades.md before changing the version",
			file, schema.RecordVersion, added, gone)
	}
}

// schemaLines appends "path json-type" for each JSON field reachable from
// typ, in declaration order.
func schemaLines(lines []string, path string, typ reflect.Type) []string {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch {
	case typ == reflect.TypeOf(time.Time{}):
		return append(lines, path+" time")
	case typ.Kind() == reflect.Struct:
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" && f.Anonymous {
				lines = schemaLines(lines, path, f.Type) // encoding/json lifts its fields
				continue
			}
			if name == "" {
				name = f.Name
			}
			lines = schemaLines(lines, path+"."+name, f.Type)
		}
		return lines
	case typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array:
		return schemaLines(lines, path+"[]", typ.Elem())
	case typ.Kind() == reflect.Map:
		return schemaLines(lines, fmt.Sprintf("%s{%s}", path, typ.Key().Kind()), typ.Elem())
	}
	return append(lines, path+" "+typ.Kind().String())
}
