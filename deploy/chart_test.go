package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"
)

// The chart is rendered here as helm renders it, without helm: helm's
// engine (helm.sh/helm/v3/pkg/engine) would bring the Kubernetes client
// libraries into the module for a test. A chart is Go text/template with
// sprig's functions and helm's include, required, fail, toYaml and tpl;
// this renderer has the few of them the chart uses, each with the
// semantics helm and sprig give it, and nothing else, so a template that
// calls another function fails to parse here. helm template gives the
// same objects for the values the tests render (checked by hand with
// helm 3.22: docs/deploy.md).

const chartDir = "helm/keyshare"

// chartMeta is the part of Chart.yaml templates see as .Chart.
type chartMeta struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

// renderChart renders the chart for release name with values over the
// chart's values.yaml (a deep merge, as helm's --values), returning each
// template's output by file name.
func renderChart(release string, values map[string]any) (map[string]string, error) {
	var meta chartMeta
	if err := readYAML(filepath.Join(chartDir, "Chart.yaml"), &meta); err != nil {
		return nil, err
	}
	defaults := map[string]any{}
	if err := readYAML(filepath.Join(chartDir, "values.yaml"), &defaults); err != nil {
		return nil, err
	}
	vals := mergeValues(defaults, values)
	files, err := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	if err != nil {
		return nil, err
	}
	root := template.New("chart").Option("missingkey=zero")
	root.Funcs(chartFuncs(root))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		name := filepath.ToSlash(filepath.Join(meta.Name, strings.TrimPrefix(f, chartDir+"/")))
		if _, err := root.New(name).Parse(string(b)); err != nil {
			return nil, err
		}
	}
	out := map[string]string{}
	for _, f := range files {
		base := filepath.Base(f)
		if strings.HasPrefix(base, "_") || !strings.HasSuffix(base, ".yaml") {
			continue
		}
		name := filepath.ToSlash(filepath.Join(meta.Name, "templates", base))
		data := map[string]any{
			"Values":   vals,
			"Chart":    map[string]any{"Name": meta.Name, "Version": meta.Version, "AppVersion": meta.AppVersion},
			"Release":  map[string]any{"Name": release, "Namespace": "default", "Service": "Helm"},
			"Template": map[string]any{"Name": name, "BasePath": meta.Name + "/templates"},
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return nil, err
		}
		// helm's engine blanks what missingkey=zero prints for a value
		// that is not there.
		out[base] = strings.ReplaceAll(buf.String(), "<no value>", "")
	}
	return out, nil
}

func readYAML(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// mergeValues is over merged into base, maps key by key, as helm merges
// --values files into the chart's values.
func mergeValues(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		b, bok := out[k].(map[string]any)
		o, ook := v.(map[string]any)
		if bok && ook {
			out[k] = mergeValues(b, o)
			continue
		}
		out[k] = v
	}
	return out
}

// chartFuncs are the functions the chart may call: helm's include,
// required, fail and toYaml, and sprig's add, contains, default, int,
// nindent, quote, replace, sha256sum, trimSuffix, trunc and upper.
func chartFuncs(root *template.Template) template.FuncMap {
	return template.FuncMap{
		"include": func(name string, data any) (string, error) {
			var buf bytes.Buffer
			err := root.ExecuteTemplate(&buf, name, data)
			return buf.String(), err
		},
		"required": func(msg string, v any) (any, error) {
			if v == nil || v == "" {
				return nil, errors.New(msg)
			}
			return v, nil
		},
		"fail": func(msg string) (string, error) { return "", errors.New(msg) },
		"toYaml": func(v any) string {
			b, err := yaml.Marshal(v)
			if err != nil {
				return ""
			}
			return strings.TrimSuffix(string(b), "\n")
		},
		"add": func(vs ...any) int64 {
			var sum int64
			for _, v := range vs {
				sum += toInt64(v)
			}
			return sum
		},
		"contains": func(substr, s string) bool { return strings.Contains(s, substr) },
		"default": func(d any, v ...any) any {
			if len(v) == 0 || isEmpty(v[0]) {
				return d
			}
			return v[0]
		},
		"int":        func(v any) int { return int(toInt64(v)) },
		"nindent":    func(n int, s string) string { return "\n" + indent(n, s) },
		"quote":      quote,
		"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
		"sha256sum":  func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) },
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"trunc": func(n int, s string) string {
			if n >= 0 && len(s) > n {
				return s[:n]
			}
			return s
		},
		"upper": strings.ToUpper,
	}
}

func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

// quote is sprig's: each non-nil argument as a Go-quoted string, joined
// by spaces.
func quote(vs ...any) string {
	var out []string
	for _, v := range vs {
		if v != nil {
			out = append(out, strconv.Quote(fmt.Sprint(v)))
		}
	}
	return strings.Join(out, " ")
}

// toInt64 is sprig's conversion for arithmetic: numbers and numeric
// strings, 0 for anything else.
func toInt64(v any) int64 {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int64:
		return n
	case float64:
		return int64(n)
	case string:
		i, _ := strconv.ParseInt(n, 10, 64)
		return i
	}
	return 0
}

// isEmpty is sprig's empty: nil, a zero number, false, "" or an empty
// collection.
func isEmpty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Map, reflect.Slice, reflect.Array, reflect.String:
		return rv.Len() == 0
	case reflect.Bool:
		return !rv.Bool()
	case reflect.Float64, reflect.Float32:
		return rv.Float() == 0
	case reflect.Int, reflect.Int64, reflect.Int32:
		return rv.Int() == 0
	}
	return false
}

// renderedObjects renders the chart and parses every object it holds,
// in file order.
func renderedObjects(release string, values map[string]any) ([]object, error) {
	out, err := renderChart(release, values)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	var objs []object
	for _, n := range names {
		o, err := decodeObjects("templates/"+n, []byte(out[n]))
		if err != nil {
			return nil, err
		}
		objs = append(objs, o...)
	}
	return objs, nil
}
