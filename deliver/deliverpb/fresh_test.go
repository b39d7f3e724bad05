package deliverpb

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestGeneratedCodeMatchesProto: the generated code was made from the
// deliver.proto beside it, as far as a check without protoc can tell:
// every message, field (name, number, type, optional or repeated), enum
// value and method the .proto declares is in the generated descriptor,
// and nothing else is. After an edit of the .proto, make proto
// regenerates the code.
func TestGeneratedCodeMatchesProto(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("deliver.proto")
	if err != nil {
		t.Fatal(err)
	}
	want := declared(t, string(src))
	got := generated(File_deliver_proto)
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("deliver.proto declares %q; the generated code lacks it: run make proto", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("the generated code has %q, which deliver.proto does not declare: run make proto", g)
		}
	}
}

var (
	blockRE  = regexp.MustCompile(`^(message|enum|service) (\w+) \{$`)
	fieldRE  = regexp.MustCompile(`^(optional |repeated )?([\w.]+) (\w+) = (\d+);$`)
	valueRE  = regexp.MustCompile(`^(\w+) = (\d+);$`)
	methodRE = regexp.MustCompile(`^rpc (\w+)\((\w+)\) returns \((\w+)\);$`)
)

// declared lists what the .proto declares, one line per item, in the form
// generated gives. It reads the .proto's own style: one declaration per
// line, no nesting.
func declared(t *testing.T, src string) []string {
	t.Helper()
	var out []string
	block := ""
	for line := range strings.Lines(src) {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if m := blockRE.FindStringSubmatch(line); m != nil {
			block = m[2]
			out = append(out, m[1]+" "+block)
			continue
		}
		f, v, r := fieldRE.FindStringSubmatch(line), valueRE.FindStringSubmatch(line), methodRE.FindStringSubmatch(line)
		switch {
		case line == "}":
			block = ""
		case block != "" && f != nil:
			out = append(out, block+"."+f[3]+" = "+f[4]+" "+f[1]+f[2])
		case block != "" && v != nil:
			out = append(out, block+"."+v[1]+" = "+v[2])
		case block != "" && r != nil:
			out = append(out, block+"."+r[1]+"("+r[2]+") "+r[3])
		case block != "" && line != "":
			t.Fatalf("deliver.proto: %q in %s is not a declaration this test reads: extend the test", line, block)
		}
	}
	return out
}

// generated lists what the generated descriptor holds, as declared does.
func generated(fd protoreflect.FileDescriptor) []string {
	var out []string
	msgs := fd.Messages()
	for i := range msgs.Len() {
		m := msgs.Get(i)
		out = append(out, "message "+string(m.Name()))
		fields := m.Fields()
		for j := range fields.Len() {
			f := fields.Get(j)
			label := ""
			switch {
			case f.IsList():
				label = "repeated "
			case f.HasOptionalKeyword():
				label = "optional "
			}
			typ := f.Kind().String()
			switch f.Kind() {
			case protoreflect.MessageKind:
				typ = string(f.Message().Name())
			case protoreflect.EnumKind:
				typ = string(f.Enum().Name())
			}
			out = append(out, string(m.Name())+"."+string(f.Name())+" = "+strconv.Itoa(int(f.Number()))+" "+label+typ)
		}
	}
	enums := fd.Enums()
	for i := range enums.Len() {
		e := enums.Get(i)
		out = append(out, "enum "+string(e.Name()))
		values := e.Values()
		for j := range values.Len() {
			v := values.Get(j)
			out = append(out, string(e.Name())+"."+string(v.Name())+" = "+strconv.Itoa(int(v.Number())))
		}
	}
	services := fd.Services()
	for i := range services.Len() {
		s := services.Get(i)
		out = append(out, "service "+string(s.Name()))
		methods := s.Methods()
		for j := range methods.Len() {
			m := methods.Get(j)
			out = append(out, string(s.Name())+"."+string(m.Name())+"("+string(m.Input().Name())+") "+string(m.Output().Name()))
		}
	}
	return out
}
