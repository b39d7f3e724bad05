package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/keyshare/keyshare/bench/peers/checker"
)

// peer is one configuration of one peer: kind, instances × concurrency.
type peer struct {
	kind      string // pc, share, plain, keyshare
	instances int
	conc      int // per instance
}

func (p peer) String() string {
	switch p.kind {
	case "pc":
		return fmt.Sprintf("Parallel Consumer, %d × %d", p.instances, p.conc)
	case "share":
		return fmt.Sprintf("share group, %d × %d consumers", p.instances, p.conc)
	case "plain":
		if p.instances == 1 {
			return "plain consumer group, 1 member"
		}
		return fmt.Sprintf("plain consumer group, %d members", p.instances)
	}
	return fmt.Sprintf("keyshare, %d × %d", p.instances, p.conc)
}

func (b *bench) peersFor(w *workload) []peer {
	all := []peer{{"pc", 1, 100}, {"pc", 4, 25}, {"share", 1, 100}, {"share", 4, 25}, {"plain", 1, 1}}
	if w.partitions > 1 {
		all = append(all, peer{"plain", int(w.partitions), 1})
	}
	all = append(all, peer{"keyshare", 1, 100}, peer{"keyshare", 4, 25})
	var out []peer
	for _, p := range all {
		for _, k := range b.peers {
			if p.kind == k {
				out = append(out, p)
			}
		}
	}
	return out
}

// instance is one running driver process.
type instance struct {
	name   string
	cmd    *exec.Cmd
	log    string
	done   chan struct{}
	killed bool
}

func (b *bench) spawn(p peer, i int, group, topic, dir, block string) (*instance, error) {
	name := fmt.Sprintf("%s-%d", p.kind, i)
	in := &instance{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	common := []string{"--brokers", b.brokers, "--topic", topic, "--group", group, "--log", in.log, "--instance", name,
		"--concurrency", strconv.Itoa(p.conc), "--work-max-us", strconv.FormatInt(b.workMax, 10)}
	if block != "" {
		common = append(common, "--block", block)
	}
	java := func(module, class string, args ...string) *exec.Cmd {
		cp := filepath.Join(b.peersDir, module, "target", "peers-"+module+".jar") + string(os.PathListSeparator) + filepath.Join(b.peersDir, module, "target", "lib", "*")
		return exec.Command("java", append([]string{"-Xmx384m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, class}, args...)...)
	}
	switch p.kind {
	case "pc":
		in.cmd = java("pc", "keyshare.peers.pc.PcDriver", common...)
	case "share":
		in.cmd = java("share", "keyshare.peers.share.ShareDriver", append(append([]string{"run"}, common...), strings.Fields(b.shareArgs)...)...)
	case "plain":
		in.cmd = exec.Command(b.driver, append([]string{"--mode", "plain"}, common...)...)
	case "keyshare":
		in.cmd = exec.Command(b.driver, append([]string{"--mode", "keyshare", "--etcd", b.etcd}, common...)...)
	}
	errf, err := os.Create(filepath.Join(dir, name+".stderr"))
	if err != nil {
		return nil, err
	}
	in.cmd.Stdout, in.cmd.Stderr = errf, errf
	if err := in.cmd.Start(); err != nil {
		errf.Close()
		return nil, err
	}
	live.Lock()
	live.m[in] = true
	live.Unlock()
	go func() {
		in.cmd.Wait()
		errf.Close()
		live.Lock()
		delete(live.m, in)
		live.Unlock()
		close(in.done)
	}()
	return in, nil
}

// live is every driver process running, for killAll.
var live = struct {
	sync.Mutex
	m map[*instance]bool
}{m: map[*instance]bool{}}

// killAll SIGKILLs every driver process still running (peerbench itself is
// being interrupted).
func killAll() {
	live.Lock()
	defer live.Unlock()
	for in := range live.m {
		_ = in.cmd.Process.Kill()
	}
}

// stop sends SIGTERM and waits up to grace, then SIGKILLs.
func (in *instance) stop(grace time.Duration) {
	select {
	case <-in.done:
		return
	default:
	}
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.done:
	case <-time.After(grace):
		_ = in.cmd.Process.Kill()
		<-in.done
	}
}

func (in *instance) kill() {
	in.killed = true
	_ = in.cmd.Process.Kill()
	<-in.done
}

// tail follows the record logs of a run.
type tail struct {
	off     map[string]int64
	seen    map[[2]int64]bool
	perInst map[string]int
}

func newTail() *tail {
	return &tail{off: map[string]int64{}, seen: map[[2]int64]bool{}, perInst: map[string]int{}}
}

func (t *tail) read(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(t.off[path], io.SeekStart); err != nil {
		return
	}
	b, _ := io.ReadAll(bufio.NewReader(f))
	last := bytes.LastIndexByte(b, '\n')
	if last < 0 {
		return
	}
	t.off[path] += int64(last + 1)
	for _, l := range strings.Split(string(b[:last]), "\n") {
		e, err := checker.ParseLine(l)
		if err != nil {
			continue
		}
		t.seen[[2]int64{int64(e.Partition), e.Offset}] = true
		inst, _, _ := strings.Cut(e.Instance, ".") // share: instance.consumer
		t.perInst[inst]++
	}
}
