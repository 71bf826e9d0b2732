package e2erealnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/mock-driver/driver"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/controlplane"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// filterProbe asks csi-scheduler-extender's /filter whether a pod with an
// unbound WaitForFirstConsumer claim of the mock driver may go to a node:
// the question the scheduler asks for a new pod.
type filterProbe struct {
	addr string
	body []byte
}

// newFilterProbe builds csi-scheduler-extender, runs it against the lab's
// API server for the mock driver, reading the driver's heartbeat Leases in
// heartbeatNS, and creates a WaitForFirstConsumer class of the driver and
// an unbound claim of it; the pod that uses the claim is only sent to the
// extender, and room for it in the node's zone (a CSIStorageCapacity in
// heartbeatNS, which goes with that namespace). The test's cleanup removes
// the rest.
func newFilterProbe(ctx context.Context, t *testing.T, heartbeatNS, node, zone string) *filterProbe {
	t.Helper()
	bin := t.TempDir()
	if err := controlplane.BuildProject(ctx, cluster.RepoRoot, bin, "./cmd/csi-scheduler-extender"); err != nil {
		t.Fatal(err)
	}
	addr, err := lab.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	health, err := lab.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, err := cluster.StartProcess("csi-scheduler-extender", filepath.Join(bin, "csi-scheduler-extender"),
		[]string{"--driver-name=" + driver.DefaultName, "--kubeconfig=" + cluster.Kubeconfig, "--listen=" + addr,
			"--http-endpoint=" + health, "--heartbeat-namespace=" + heartbeatNS, "-v=4"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	class := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: "real-node-wffc"},
		Provisioner:       driver.DefaultName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
	if _, err := cluster.Client.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.StorageV1().StorageClasses().Delete(ctx, class.Name, metav1.DeleteOptions{})
	})
	claim := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "heartbeat-probe", Namespace: "default"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			StorageClassName: &class.Name,
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.CoreV1().PersistentVolumeClaims("default").Delete(ctx, claim.Name, metav1.DeleteOptions{})
	})
	// deploy/'s CSIDriver has storageCapacity: the node's zone has room.
	capacity := &storagev1.CSIStorageCapacity{
		ObjectMeta:       metav1.ObjectMeta{Name: "heartbeat-probe", Namespace: heartbeatNS},
		NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{driver.TopologyPrefix + "zone": zone}},
		StorageClassName: class.Name,
		Capacity:         ptr.To(resource.MustParse("100Gi")),
	}
	if _, err := cluster.Client.StorageV1().CSIStorageCapacities(heartbeatNS).Create(ctx, capacity, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "heartbeat-probe", Namespace: "default", UID: "heartbeat-probe"},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "c", Image: "unused"}},
			Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name}}}},
		},
	}
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &[]string{node}})
	if err != nil {
		t.Fatal(err)
	}
	return &filterProbe{addr: addr, body: body}
}

// waitFilter waits until the extender's answer for the node is want
// (passes or not), and returns the reason it gave for failing it.
func (f *filterProbe) waitFilter(ctx context.Context, t *testing.T, node string, want bool) string {
	t.Helper()
	var last, reason string
	err := cluster.WaitFor(ctx, podTimeout, func(ctx context.Context) (bool, error) {
		res, err := f.filter(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		passed := res.NodeNames != nil && len(*res.NodeNames) == 1 && (*res.NodeNames)[0] == node
		reason = res.FailedNodes[node] + res.FailedAndUnresolvableNodes[node]
		last = fmt.Sprintf("passed %v, failed %q, error %q", passed, reason, res.Error)
		return passed == want, nil
	})
	if err != nil {
		t.Fatalf("the extender's filter never answered passes=%v for %s: %v; last: %s", want, node, err, last)
	}
	return reason
}

// filter posts the probe's pod and node to /filter.
func (f *filterProbe) filter(ctx context.Context) (*extenderv1.ExtenderFilterResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.addr+"/filter", bytes.NewReader(f.body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/filter: %d %s", resp.StatusCode, answer)
	}
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(answer, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
