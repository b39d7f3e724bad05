package deploy

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// nonrootUID is the image's user id (runtime-files.txt, the Dockerfile's
// USER).
func nonrootUID(t *testing.T) int64 {
	t.Helper()
	uid, _, _ := strings.Cut(readRuntimeFiles(t).nonrootUser(t), ":")
	n, err := strconv.ParseInt(uid, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// plainMemberObjects are the objects kubectl apply -k deploy/kubernetes
// applies, with the optional ScaledObject when keda is set.
func plainMemberObjects(t *testing.T, keda bool) []object {
	t.Helper()
	files, err := kustomizeResources()
	if err != nil {
		t.Fatal(err)
	}
	if keda {
		files = append(files, "keda-scaledobject.yaml")
	}
	objs, err := plainObjects(files...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestPlainManifests(t *testing.T) {
	flags := readMemberFlags(t)
	for _, keda := range []bool{false, true} {
		m, err := loadMemberSet(plainMemberObjects(t, keda), flags)
		if err != nil {
			t.Fatal(err)
		}
		m.check(t, nonrootUID(t))
	}
}

// chartValueSets are the values the chart's invariants are checked with:
// its defaults, and changes of everything the templates compute from.
var chartValueSets = map[string]map[string]any{
	"defaults": nil,
	"changed": {
		"group": "payments", "topics": []any{"payments", "refunds"},
		"ttlSeconds": 20, "drainTimeoutSeconds": 120,
		"metrics":  map[string]any{"port": 9500},
		"settings": map[string]any{"concurrency": 32, "max-in-flight": 5000},
		"secrets":  map[string]any{"name": "payments-secrets", "deliverTokenKey": ""},
		"keda":     map[string]any{"enabled": true},
	},
	"grace given": {"terminationGracePeriodSeconds": 300, "drainTimeoutSeconds": 60},
	"no secrets":  {"secrets": map[string]any{"enabled": false}, "etcd": map[string]any{"user": ""}},
}

func TestChartInvariants(t *testing.T) {
	flags := readMemberFlags(t)
	for name, values := range chartValueSets {
		t.Run(name, func(t *testing.T) {
			objs, err := renderedObjects("orders", values)
			if err != nil {
				t.Fatal(err)
			}
			m, err := loadMemberSet(objs, flags)
			if err != nil {
				t.Fatal(err)
			}
			m.check(t, nonrootUID(t))
			if (m.scaler != nil) != (m.deploy.Spec.Replicas == nil) {
				t.Errorf("ScaledObject %v, Deployment replicas %v: KEDA sets the replicas, or the Deployment does", m.scaler != nil, m.deploy.Spec.Replicas)
			}
		})
	}
}

// TestChartChangedValuesReachTheMembers: what the "changed" values set is
// what the members run with.
func TestChartChangedValuesReachTheMembers(t *testing.T) {
	objs, err := renderedObjects("orders", chartValueSets["changed"])
	if err != nil {
		t.Fatal(err)
	}
	m, err := loadMemberSet(objs, readMemberFlags(t))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"group": "payments", "ttl": "20s", "drain-timeout": "120s", "metrics-addr": "0.0.0.0:9500",
		"concurrency": "32", "max-in-flight": "5000", "deliver-token-file": "", "topic": "refunds",
		"etcd-password-file": "/etc/keyshare/secrets/etcd-password"}
	for flag, v := range want {
		if got := m.effective[flag]; got != v {
			t.Errorf("--%s %q; want %q", flag, got, v)
		}
	}
	if got := strings.Join(m.args, " "); got != "--topic payments --topic refunds" {
		t.Errorf("args %q: want each topic as a --topic", got)
	}
	if _, ok := m.config.Data["KEYSHARE_TOPIC"]; ok {
		t.Error("KEYSHARE_TOPIC beside --topic arguments: a variable gives --topic one value, and none beside the flag")
	}
}

func TestChartRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		values map[string]any
		want   string
	}{
		"a grace period short of drain + TTL": {map[string]any{"terminationGracePeriodSeconds": 45}, "terminationGracePeriodSeconds 45 is below"},
		"no group":                            {map[string]any{"group": ""}, "group is required"},
		"no endpoint":                         {map[string]any{"deliver": ""}, "deliver is required"},
	} {
		_, err := renderChart("orders", c.values)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: rendered with error %v; want one saying %q", name, err, c.want)
		}
	}
}

// TestChartRendersThePlainManifests: with release name "orders" and the
// chart's defaults, the chart gives the objects of deploy/kubernetes (its
// checksum annotation aside), and with keda or demo on, theirs.
func TestChartRendersThePlainManifests(t *testing.T) {
	for name, c := range map[string]struct {
		values map[string]any
		plain  []string
	}{
		"defaults": {nil, nil},
		"keda":     {map[string]any{"keda": map[string]any{"enabled": true}}, []string{"keda-scaledobject.yaml"}},
		"demo":     {map[string]any{"demo": map[string]any{"enabled": true}}, []string{"demo-pod.yaml"}},
	} {
		t.Run(name, func(t *testing.T) {
			files, err := kustomizeResources()
			if err != nil {
				t.Fatal(err)
			}
			want, err := plainObjects(append(files, c.plain...)...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := renderedObjects("orders", c.values)
			if err != nil {
				t.Fatal(err)
			}
			compareObjects(t, "the chart", got, want, c.values["keda"] != nil)
		})
	}
}

// compareObjects matches the objects source gave (got) with want by kind
// and name. With keda on the chart's Deployment leaves replicas to KEDA,
// where the plain manifests say to remove them.
func compareObjects(t *testing.T, source string, got, want []object, keda bool) {
	t.Helper()
	byKey := map[string]object{}
	for _, o := range got {
		byKey[o.kind()+"/"+o.name()] = o
	}
	for _, w := range want {
		g, ok := byKey[w.kind()+"/"+w.name()]
		if !ok {
			t.Errorf("%s renders no %s", source, w)
			continue
		}
		delete(byKey, w.kind()+"/"+w.name())
		if w.kind() == "Deployment" {
			dropChecksum(g)
			if keda {
				delete(w.raw["spec"].(map[string]any), "replicas")
			}
		}
		if !equalJSON(g.raw, w.raw) {
			t.Errorf("%s's %s differs from %s:\ngot:   %s\nplain: %s", source, g, w.file, jsonOf(g.raw), jsonOf(w.raw))
		}
	}
	for _, o := range byKey {
		t.Errorf("%s renders %s, which deploy/kubernetes does not have", source, o)
	}
}

func dropChecksum(o object) {
	ann := o.raw["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"].(map[string]any)
	delete(ann, "checksum/config")
}

// TestOperationsKEDAExample: docs/operations.md's ScaledObject is
// kubernetes/keda-scaledobject.yaml's (the same spec, for the same
// Deployment).
func TestOperationsKEDAExample(t *testing.T) {
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var example []object
	for _, block := range yamlBlock.FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(block[1], "kind: ScaledObject") {
			if example, err = decodeObjects("docs/operations.md", []byte(block[1])); err != nil {
				t.Fatal(err)
			}
		}
	}
	plain, err := plainObjects("keda-scaledobject.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(example) != 1 || len(plain) != 1 {
		t.Fatalf("%d ScaledObjects in docs/operations.md, %d in keda-scaledobject.yaml; want one each", len(example), len(plain))
	}
	if e, p := example[0], plain[0]; e.name() != p.name() || !equalJSON(e.raw["spec"], p.raw["spec"]) {
		t.Errorf("docs/operations.md's ScaledObject differs from %s:\ndoc:   %s %s\nplain: %s %s", p.file, e.name(), jsonOf(e.raw["spec"]), p.name(), jsonOf(p.raw["spec"]))
	}
}

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestKustomization: kubectl kustomize (where kubectl is installed)
// renders deploy/kubernetes to the objects the other tests read.
func TestKustomization(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: kustomization.yaml is read but not rendered here")
	}
	out, err := exec.Command(kubectl, "kustomize", "kubernetes").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/kubernetes: %v\n%s", err, out)
	}
	got, err := decodeObjects("kubectl kustomize", out)
	if err != nil {
		t.Fatal(err)
	}
	compareObjects(t, "kubectl kustomize", got, plainMemberObjects(t, false), false)
}
