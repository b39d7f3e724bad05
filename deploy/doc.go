// Package deploy holds no code of its own: it is where the files that run
// keyshare members outside a Go program live, and its tests hold them to
// the binary they run.
//
//   - Dockerfile, runtime-files.txt: the member image, and what its
//     distroless base gives the binary (image_test.go runs a member in a
//     root directory built from that list, with chroot as the image's
//     nonroot user);
//   - kubernetes/: plain manifests (a member Deployment, its ConfigMap of
//     the settings every member of a group shares, a PodDisruptionBudget,
//     an optional KEDA ScaledObject, the demo as one pod);
//   - helm/keyshare/: a chart rendering the same from one values file;
//   - systemd/: a unit and an environment file for hosts without
//     Kubernetes.
//
// The tests read every flag and environment variable the files set
// against `keyshare member -h` of a binary built as the Dockerfile builds
// it, and check the shutdown budget (grace period, TimeoutStopSec) against
// the drain timeout and the session TTL the members run with.
// docs/deploy.md is the manual.
package deploy
