package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// object is a Kubernetes object as parsed YAML (JSON's types), with the
// file it came from.
type object struct {
	file string
	raw  map[string]any
}

func (o object) kind() string { s, _ := o.raw["kind"].(string); return s }

func (o object) name() string {
	m, _ := o.raw["metadata"].(map[string]any)
	s, _ := m["name"].(string)
	return s
}

func (o object) String() string { return fmt.Sprintf("%s %s (%s)", o.kind(), o.name(), o.file) }

// into decodes the object into v (a struct with the fields a check reads).
func (o object) into(v any) error {
	b, err := json.Marshal(o.raw)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// decodeObjects parses the YAML documents of a file; empty ones (a
// template that rendered nothing) are left out.
func decodeObjects(file string, data []byte) ([]object, error) {
	var out []object
	for _, doc := range docSeparator.Split(string(data), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		raw := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &raw); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(raw) == 0 {
			continue
		}
		out = append(out, object{file: file, raw: raw})
	}
	return out, nil
}

// plainObjects parses files of deploy/kubernetes.
func plainObjects(files ...string) ([]object, error) {
	var out []object
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("kubernetes", f))
		if err != nil {
			return nil, err
		}
		objs, err := decodeObjects("kubernetes/"+f, b)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// kustomizeResources are the files kubernetes/kustomization.yaml applies.
func kustomizeResources() ([]string, error) {
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := readYAML("kubernetes/kustomization.yaml", &k); err != nil {
		return nil, err
	}
	return k.Resources, nil
}

// The fields of the objects the checks read.

type meta struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type deployment struct {
	Metadata meta `json:"metadata"`
	Spec     struct {
		Replicas *int `json:"replicas"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Template struct {
			Metadata meta    `json:"metadata"`
			Spec     podSpec `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot *bool  `json:"runAsNonRoot"`
		RunAsUser    *int64 `json:"runAsUser"`
		RunAsGroup   *int64 `json:"runAsGroup"`
	} `json:"securityContext"`
	Containers []container `json:"containers"`
	Volumes    []struct {
		Name   string `json:"name"`
		Secret *struct {
			SecretName  string `json:"secretName"`
			DefaultMode *int   `json:"defaultMode"`
		} `json:"secret"`
		EmptyDir any `json:"emptyDir"`
	} `json:"volumes"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `json:"name"`
		} `json:"configMapRef"`
	} `json:"envFrom"`
	Env []struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		ValueFrom any    `json:"valueFrom"`
	} `json:"env"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	ReadinessProbe *probe `json:"readinessProbe"`
	LivenessProbe  *probe `json:"livenessProbe"`
	StartupProbe   *probe `json:"startupProbe"`
	VolumeMounts   []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
	} `json:"volumeMounts"`
	SecurityContext struct {
		ReadOnlyRootFilesystem *bool `json:"readOnlyRootFilesystem"`
	} `json:"securityContext"`
}

type probe struct {
	HTTPGet *struct {
		Path string          `json:"path"`
		Port json.RawMessage `json:"port"`
	} `json:"httpGet"`
}

type configMap struct {
	Metadata meta              `json:"metadata"`
	Data     map[string]string `json:"data"`
}

type disruptionBudget struct {
	Metadata meta `json:"metadata"`
	Spec     struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
	} `json:"spec"`
}

type scaledObject struct {
	Metadata meta `json:"metadata"`
	Spec     struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		Triggers []struct {
			Type     string            `json:"type"`
			Metadata map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// equalJSON reports whether a and b are the same JSON values.
func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
