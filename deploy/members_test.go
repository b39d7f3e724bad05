package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// shutdownMargin is the least time a leaving member's budget keeps above
// its drain timeout plus its session TTL: after the drain the member
// flushes, releases, and closes its etcd and Kafka clients (a second or
// two), and a member cut off from etcd stops within a TTL of its session
// ending. The files give 15 s.
const shutdownMargin = 10 * time.Second

// secretFlags are the member's flags that name a file holding a secret:
// each must point into a read-only secret volume, never be inline.
var secretFlags = []string{"etcd-password-file", "deliver-token-file", "kafka-config",
	"deliver-header-file", "deliver-key", "etcd-key"}

// memberSet is one group's member objects: a Deployment, the ConfigMap
// its members read, and the PodDisruptionBudget and ScaledObject when
// there are.
type memberSet struct {
	deploy    deployment
	member    container
	config    configMap
	pdb       *disruptionBudget
	scaler    *scaledObject
	env       map[string]string // the member's environment: the ConfigMap, then env
	args      []string          // after the subcommand
	effective settings
}

// loadMemberSet finds the member objects among objs and resolves the
// member's settings against the binary's flags.
func loadMemberSet(objs []object, flags *memberFlags) (*memberSet, error) {
	m := &memberSet{env: map[string]string{}}
	configs := map[string]configMap{}
	var err error
	deployments := 0
	for _, o := range objs {
		switch o.kind() {
		case "Deployment":
			deployments++
			err = o.into(&m.deploy)
		case "ConfigMap":
			var c configMap
			err = o.into(&c)
			configs[c.Metadata.Name] = c
		case "PodDisruptionBudget":
			m.pdb = &disruptionBudget{}
			err = o.into(m.pdb)
		case "ScaledObject":
			m.scaler = &scaledObject{}
			err = o.into(m.scaler)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o, err)
		}
	}
	if deployments != 1 || len(m.deploy.Spec.Template.Spec.Containers) != 1 {
		return nil, fmt.Errorf("want one Deployment with one container; found %d Deployments", deployments)
	}
	m.member = m.deploy.Spec.Template.Spec.Containers[0]
	if len(m.member.Command) > 0 || len(m.member.Args) == 0 || m.member.Args[0] != "member" {
		return nil, fmt.Errorf("container %s: command %q args %q; want the image's entrypoint with args [member ...]", m.member.Name, m.member.Command, m.member.Args)
	}
	m.args = m.member.Args[1:]
	if err := m.readEnvironment(configs); err != nil {
		return nil, err
	}
	if m.effective, err = flags.resolve(m.env, m.args); err != nil {
		return nil, fmt.Errorf("container %s: %w", m.member.Name, err)
	}
	return m, nil
}

// readEnvironment builds the member's environment from its envFrom
// ConfigMap and its env; every ConfigMap of the set must be the one it
// reads, so that no key sits unused.
func (m *memberSet) readEnvironment(configs map[string]configMap) error {
	for _, from := range m.member.EnvFrom {
		if from.ConfigMapRef == nil {
			return fmt.Errorf("container %s: envFrom other than a configMapRef", m.member.Name)
		}
		c, ok := configs[from.ConfigMapRef.Name]
		if !ok {
			return fmt.Errorf("container %s reads ConfigMap %s, which the manifests do not hold", m.member.Name, from.ConfigMapRef.Name)
		}
		m.config = c
		delete(configs, c.Metadata.Name)
		for k, v := range c.Data {
			m.env[k] = v
		}
	}
	for name := range configs {
		return fmt.Errorf("ConfigMap %s is not read by the member container (envFrom): its keys are unused", name)
	}
	if m.config.Metadata.Name == "" {
		return fmt.Errorf("container %s reads no ConfigMap: the shared settings belong in one", m.member.Name)
	}
	for _, e := range m.member.Env {
		if e.ValueFrom != nil {
			return fmt.Errorf("env %s comes from valueFrom: secrets are mounted files here, settings are in the ConfigMap", e.Name)
		}
		m.env[e.Name] = e.Value
	}
	return nil
}

// metricsPort is the port of the member's --metrics-addr.
func (m *memberSet) metricsPort(t *testing.T) int {
	t.Helper()
	_, p, err := net.SplitHostPort(m.effective["metrics-addr"])
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || port == 0 {
		t.Fatalf("--metrics-addr %q: the probes and Prometheus need a fixed host:port", m.effective["metrics-addr"])
	}
	return port
}

// probePort resolves a probe's port (a number or a container port's name)
// to a number.
func (m *memberSet) probePort(t *testing.T, raw json.RawMessage) int {
	t.Helper()
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return n
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		t.Fatalf("probe port %s: want a number or a port name", raw)
	}
	for _, p := range m.member.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("probe port %q names no port of container %s", name, m.member.Name)
	return 0
}

// probePaths are the HTTP paths of the member's probes.
func (m *memberSet) probePaths() []string {
	var out []string
	for _, p := range []*probe{m.member.ReadinessProbe, m.member.LivenessProbe, m.member.StartupProbe} {
		if p != nil && p.HTTPGet != nil {
			out = append(out, p.HTTPGet.Path)
		}
	}
	return out
}

// check holds the set to the invariants docs/deploy.md states.
func (m *memberSet) check(t *testing.T, nonrootUID int64) {
	t.Helper()
	m.checkGrace(t)
	m.checkProbes(t)
	m.checkSecrets(t)
	pod := m.deploy.Spec.Template.Spec
	if sc := pod.SecurityContext; sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != nonrootUID {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and runAsUser %d, the image's user", sc, nonrootUID)
	}
	if ro := m.member.SecurityContext.ReadOnlyRootFilesystem; ro == nil || !*ro {
		t.Error("the member writes no file: its root filesystem should be read-only")
	}
	sel := m.deploy.Spec.Selector.MatchLabels
	for k, v := range sel {
		if m.deploy.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the Deployment's selector %s=%s does not match its pods' labels %v", k, v, m.deploy.Spec.Template.Metadata.Labels)
		}
	}
	if m.pdb == nil || !equalJSON(m.pdb.Spec.Selector.MatchLabels, sel) {
		t.Errorf("PodDisruptionBudget %+v: want one with the Deployment's selector %v", m.pdb, sel)
	}
	if m.scaler != nil {
		m.checkScaler(t)
	}
}

// checkGrace: the kubelet's SIGKILL must not cut a leaving member's
// drain short.
func (m *memberSet) checkGrace(t *testing.T) {
	t.Helper()
	drain, ttl := m.effective.duration(t, "drain-timeout"), m.effective.duration(t, "ttl")
	g := m.deploy.Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil {
		t.Errorf("no terminationGracePeriodSeconds (the kubelet's default is 30 s); want at least drain %v + TTL %v + %v", drain, ttl, shutdownMargin)
		return
	}
	if grace := time.Duration(*g) * time.Second; grace < drain+ttl+shutdownMargin {
		t.Errorf("terminationGracePeriodSeconds %d: below drain %v + TTL %v + %v = %v; the kubelet kills a member mid-drain",
			*g, drain, ttl, shutdownMargin, drain+ttl+shutdownMargin)
	}
}

func (m *memberSet) checkProbes(t *testing.T) {
	t.Helper()
	port := m.metricsPort(t)
	want := map[string]*probe{"/readyz": m.member.ReadinessProbe, "/healthz": m.member.LivenessProbe}
	for path, p := range want {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path {
			t.Errorf("container %s: want an httpGet probe of %s (readiness /readyz, liveness /healthz); have %+v", m.member.Name, path, p)
			continue
		}
		if got := m.probePort(t, p.HTTPGet.Port); got != port {
			t.Errorf("probe of %s on port %d; the member serves it on %d (--metrics-addr %s)", path, got, port, m.effective["metrics-addr"])
		}
	}
	ann := m.deploy.Spec.Template.Metadata.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(port) || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("pod annotations %v: want prometheus.io/scrape true, port %d, path /metrics", ann, port)
	}
}

// checkSecrets: every secret the member reads is a file of a read-only
// secret volume, none is in its environment.
func (m *memberSet) checkSecrets(t *testing.T) {
	t.Helper()
	if _, ok := m.env["KEYSHARE_ETCD_PASSWORD"]; ok {
		t.Error("KEYSHARE_ETCD_PASSWORD set in the manifests: mount the password as a file (--etcd-password-file)")
	}
	secretVolumes := map[string]bool{}
	for _, v := range m.deploy.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secretVolumes[v.Name] = true
		}
	}
	for _, flag := range secretFlags {
		file := m.effective[flag]
		if file == "" {
			continue
		}
		mounted := false
		for _, vm := range m.member.VolumeMounts {
			mounted = mounted || (path.Dir(file) == vm.MountPath && vm.ReadOnly && secretVolumes[vm.Name])
		}
		if !mounted {
			t.Errorf("--%s %s is in no read-only secret volume mounted at %s", flag, file, path.Dir(file))
		}
	}
}

var groupLabel = regexp.MustCompile(`group="([^"]*)"`)

func (m *memberSet) checkScaler(t *testing.T) {
	t.Helper()
	if got := m.scaler.Spec.ScaleTargetRef.Name; got != m.deploy.Metadata.Name {
		t.Errorf("the ScaledObject scales %q; the members' Deployment is %q", got, m.deploy.Metadata.Name)
	}
	q := m.scalerQuery(t)
	for _, g := range groupLabel.FindAllStringSubmatch(q, -1) {
		if g[1] != m.effective["group"] {
			t.Errorf("the ScaledObject's query selects group %q; the members' group is %q", g[1], m.effective["group"])
		}
	}
	if !strings.Contains(q, "keyshare_group_backlog") {
		t.Errorf("the ScaledObject's query does not read the backlog: %s", q)
	}
}

// scalerQuery is the query of the ScaledObject's prometheus trigger.
func (m *memberSet) scalerQuery(t *testing.T) string {
	t.Helper()
	for _, tr := range m.scaler.Spec.Triggers {
		if tr.Type == "prometheus" {
			return tr.Metadata["query"]
		}
	}
	t.Fatal("the ScaledObject has no prometheus trigger")
	return ""
}
