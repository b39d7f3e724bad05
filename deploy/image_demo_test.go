package deploy

import (
	"testing"
	"time"
)

// TestImageRunsTheDemoPod runs kubernetes/demo-pod.yaml's command in the
// image's file set as the image's user (a shorter run: fewer records over
// less time). The demo starts its own etcd, broker and member processes
// (the binary again, through /proc/self/exe), writes under /tmp, and
// exits 0 only when its checks pass: no record lost, each key in order.
func TestImageRunsTheDemoPod(t *testing.T) {
	img := assembleImage(t)
	objs, err := plainObjects("demo-pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pod struct {
		Spec podSpec `json:"spec"`
	}
	if len(objs) != 1 || objs[0].kind() != "Pod" {
		t.Fatalf("demo-pod.yaml holds %v; want one Pod", objs)
	}
	if err := objs[0].into(&pod); err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "demo" {
		t.Fatalf("the demo pod runs %q; want the image's entrypoint with args [demo ...]", c.Args)
	}
	mountsTmp := false
	for _, vm := range c.VolumeMounts {
		mountsTmp = mountsTmp || vm.MountPath == "/tmp"
	}
	if !mountsTmp {
		t.Error("the demo pod mounts nothing on /tmp: with a read-only root the demo has nowhere to write")
	}
	args := append(append([]string(nil), c.Args...), "--duration", "4s", "--records", "2000")
	demo := startInImage(t, img, nil, args)
	select {
	case <-demo.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the demo still runs after 2 minutes; its output:\n%s", demo.tail())
	}
	if demo.err != nil {
		t.Fatalf("the demo in the image's file set ended with %v:\n%s", demo.err, demo.tail())
	}
	t.Logf("the demo's summary:\n%s", demo.tail())
}
