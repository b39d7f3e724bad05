package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, its continuation lines
// joined.
type instruction struct {
	cmd, args string // "RUN", "go build ..."
	line      int
}

// stage is a Dockerfile build stage: its FROM image, its AS name and its
// instructions.
type stage struct {
	from, name string
	ins        []instruction
}

// parseDockerfile reads the instructions of path by stage. It knows the
// syntax deploy/Dockerfile uses: comments, backslash continuations, and
// FROM IMAGE [AS NAME].
func parseDockerfile(path string) ([]stage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var stages []stage
	var globalArgs []instruction
	var cur strings.Builder
	start, n := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				return nil, fmt.Errorf("%s:%d: %s before the first FROM", path, in.line, in.cmd)
			}
			globalArgs = append(globalArgs, in)
			continue
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	if len(stages) < 2 {
		return nil, fmt.Errorf("%s: %d stages; want a builder and a runtime", path, len(stages))
	}
	for i := range stages {
		stages[i].from = expandArgs(stages[i].from, globalArgs)
	}
	return stages, sc.Err()
}

// expandArgs replaces ${NAME} in s with the default of the ARG NAME=VALUE
// before the first FROM, as docker does in a FROM line.
func expandArgs(s string, args []instruction) string {
	for _, a := range args {
		if k, v, ok := strings.Cut(a.args, "="); ok {
			s = strings.ReplaceAll(s, "${"+k+"}", v)
		}
	}
	return s
}

// of is the stage's instructions of one kind.
func (s stage) of(cmd string) []instruction {
	var out []instruction
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// env is what the stage's ENV instructions (KEY=VALUE forms) set.
func (s stage) env() map[string]string {
	out := map[string]string{}
	for _, in := range s.of("ENV") {
		for _, kv := range strings.Fields(in.args) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				out[k] = v
			}
		}
	}
	return out
}

// goBuild is a go build command line, without "go".
type goBuild []string

// goBuild finds the stage's RUN of go build (past its --mount options).
func (s stage) goBuild() (goBuild, error) {
	for _, in := range s.of("RUN") {
		f := strings.Fields(in.args)
		for len(f) > 0 && strings.HasPrefix(f[0], "--") {
			f = f[1:]
		}
		if len(f) > 1 && f[0] == "go" && f[1] == "build" {
			return goBuild(f[1:]), nil
		}
	}
	return nil, fmt.Errorf("the Dockerfile's %s stage runs no go build", s.name)
}

// output is the value of -o.
func (b goBuild) output() string {
	for i, a := range b {
		if a == "-o" && i+1 < len(b) {
			return b[i+1]
		}
	}
	return ""
}

// withOutput is b with -o out.
func (b goBuild) withOutput(out string) []string {
	c := append([]string(nil), b...)
	for i, a := range c {
		if a == "-o" && i+1 < len(c) {
			c[i+1] = out
		}
	}
	return c
}

// makeBuild is the go build command of the Makefile's build target and
// the variables its recipe uses.
func makeBuild(t *testing.T) (cmd goBuild, vars map[string]string) {
	t.Helper()
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	vars = map[string]string{}
	assign := regexp.MustCompile(`^(?:export\s+)?([A-Z_]+)\s*[:?]?=\s*(.*)$`)
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if m := assign.FindStringSubmatch(l); m != nil {
			vars[m[1]] = strings.TrimSpace(m[2])
		}
		if l == "build:" && i+1 < len(lines) {
			f := strings.Fields(lines[i+1])
			if len(f) > 1 && f[0] == "$(GO)" && f[1] == "build" {
				cmd = goBuild(f[1:])
			}
		}
	}
	if cmd == nil {
		t.Fatal("the Makefile's build target runs no $(GO) build")
	}
	return cmd, vars
}

// TestDockerfileBuildsAsMakeBuild holds the builder stage to `make
// build`: the same go build arguments but the output path, and cgo on.
func TestDockerfileBuildsAsMakeBuild(t *testing.T) {
	stages, err := parseDockerfile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	builder := stages[0]
	got, err := builder.goBuild()
	if err != nil {
		t.Fatal(err)
	}
	want, vars := makeBuild(t)
	if g, w := got.withOutput("OUT"), want.withOutput("OUT"); !reflect.DeepEqual(g, w) {
		t.Errorf("the Dockerfile builds with go %s; make build with go %s", strings.Join(g, " "), strings.Join(w, " "))
	}
	if vars["CGO_ENABLED"] != "1" || builder.env()["CGO_ENABLED"] != "1" {
		t.Errorf("CGO_ENABLED: Makefile %q, Dockerfile builder %q; both must be 1 (librdkafka is C)", vars["CGO_ENABLED"], builder.env()["CGO_ENABLED"])
	}
}

// TestDockerfileRuntimeStage checks the runtime stage against
// runtime-files.txt: its base is the one listed, it adds nothing but the
// builder's binary, runs it as the listed nonroot user, and its
// ENTRYPOINT is that binary.
func TestDockerfileRuntimeStage(t *testing.T) {
	stages, err := parseDockerfile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	rf := readRuntimeFiles(t)
	rt := stages[len(stages)-1]
	if rt.from != rf.base {
		t.Errorf("the runtime stage is FROM %s; runtime-files.txt describes %s", rt.from, rf.base)
	}
	bin := imageBinary(t, stages)
	var entry []string
	for _, in := range rt.ins {
		switch in.cmd {
		case "COPY", "USER", "CMD":
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &entry); err != nil {
				t.Errorf("Dockerfile:%d: ENTRYPOINT %s: want the JSON form (no shell in the image): %v", in.line, in.args, err)
			}
		default:
			t.Errorf("Dockerfile:%d: %s in the runtime stage: it adds the binary only (no shell to RUN with)", in.line, in.cmd)
		}
	}
	if len(entry) != 1 || entry[0] != bin {
		t.Errorf("ENTRYPOINT %q; want [%q], the binary the stage copies", entry, bin)
	}
	users := rt.of("USER")
	if len(users) != 1 || users[0].args != rf.nonrootUser(t) {
		t.Errorf("USER %v; want %s, runtime-files.txt's nonroot user and group", users, rf.nonrootUser(t))
	}
}

// imageBinary is where the runtime stage's one COPY puts the builder's
// go build output; it fails the test unless that is all it copies.
func imageBinary(t *testing.T, stages []stage) string {
	t.Helper()
	builder, rt := stages[0], stages[len(stages)-1]
	build, err := builder.goBuild()
	if err != nil {
		t.Fatal(err)
	}
	copies := rt.of("COPY")
	want := "--from=" + builder.name + " " + build.output() + " "
	if len(copies) != 1 || !strings.HasPrefix(copies[0].args, want) {
		t.Fatalf("the runtime stage copies %v; want one COPY %sDEST", copies, want)
	}
	return strings.TrimPrefix(copies[0].args, want)
}

// debianReleases names Debian's releases as golang's image tags and
// distroless's do.
var debianReleases = map[string]string{"debian12": "bookworm", "debian13": "trixie"}

// TestDockerfileBuilderMatchesRuntime: the builder is the Go of go.mod on
// the runtime base's Debian release. The golang image's default release
// is the newest; a binary linked against a newer glibc than the runtime's
// may not start there.
func TestDockerfileBuilderMatchesRuntime(t *testing.T) {
	stages, err := parseDockerfile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	builder, rt := stages[0].from, stages[len(stages)-1].from
	release := ""
	for d, name := range debianReleases {
		if strings.Contains(rt, "-"+d) {
			release = name
		}
	}
	if release == "" || !strings.HasSuffix(builder, "-"+release) {
		t.Errorf("the builder is %s and the runtime %s: build on the runtime's Debian release (golang:VERSION-%s)", builder, rt, release)
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	if v := "golang:" + string(goLine[1]); builder != v && !strings.HasPrefix(builder, v+"-") {
		t.Errorf("the builder is %s; go.mod says go %s", builder, goLine[1])
	}
}
