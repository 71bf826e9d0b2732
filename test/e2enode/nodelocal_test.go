package e2enode

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/test/harness/lab"
)

// A StatefulSet of 12 replicas with WaitForFirstConsumer claims
// on a node-local driver: every claim is Bound to a volume of its pod's
// node, made by that node's driver; no other node's driver was asked for
// it.
func TestStatefulSetNodeLocal(t *testing.T) {
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	const replicas = 12
	labels := map[string]string{"app": "web"}
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](replicas), ServiceName: "web",
			// No kubelet: a pod never becomes Ready, so OrderedReady would
			// stop at the first one.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
					VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}}}},
			},
			VolumeClaimTemplates: []v1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(classWFFC), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
					Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
			}},
		},
	}
	if _, err := client.AppsV1().StatefulSets(ns).Create(ctx, ss, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var claims []string
	for i := 0; i < replicas; i++ {
		claims = append(claims, fmt.Sprintf("data-web-%d", i))
	}
	got := waitAllBound(t, ctx, ns, claims)

	perNode := map[string]int{}
	claimNode := map[string]string{} // volume name -> the node of its pod
	for i := 0; i < replicas; i++ {
		pod := fmt.Sprintf("web-%d", i)
		node := lab.WaitPodNode(t, ctx, nl.Cluster, ns, pod)
		perNode[node]++
		b := got[claims[i]]
		claimNode[lab.VolumeName(b.claim)] = node
		if sel := b.claim.Annotations[lab.AnnSelectedNode]; sel != node {
			t.Errorf("claim %s: selected-node %q, its pod %s is on %s", claims[i], sel, pod, node)
		}
		if pvn, err := pvNode(b.pv); err != nil {
			t.Error(err)
		} else if pvn != node {
			t.Errorf("claim %s: PV %s is on %s, its pod %s on %s", claims[i], b.pv.Name, pvn, pod, node)
		}
		vols, err := nl.Volumes(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, v := range vols {
			if v.ID == b.pv.Spec.CSI.VolumeHandle && v.Name == lab.VolumeName(b.claim) {
				found = true
			}
		}
		if !found {
			t.Errorf("claim %s: the driver of %s has no volume %s (%s)", claims[i], node, b.pv.Spec.CSI.VolumeHandle, lab.VolumeName(b.claim))
		}
	}
	t.Logf("pods per node: %s", countBy(perNode))

	calls := callsByVolume(t, ctx)
	for vol, node := range claimNode {
		ok := 0
		for n, recs := range calls[vol] {
			if n != node {
				t.Errorf("the driver of %s got %d CreateVolume for %s, whose claim is selected for %s: %+v", n, len(recs), vol, node, recs)
				continue
			}
			for _, r := range recs {
				if r.Code == "OK" {
					ok++
				}
			}
		}
		if ok == 0 {
			t.Errorf("the driver of %s made no volume %s: %+v", node, vol, calls[vol])
		}
	}
}

// 50 Immediate claims of a node-local class: the nodes'
// provisioners race for them; every one is Bound, spread over more than one
// node, and exactly one CreateVolume was made for each, over all drivers,
// on the driver of the node the winner wrote into the claim.
func TestImmediateExactlyOnce(t *testing.T) {
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	const n = 50
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("imm-%02d", i)
		lab.NewClaim(t, ctx, nl.Cluster, ns, name, classImmediate, gi)
		names = append(names, name)
	}
	got := waitAllBound(t, ctx, ns, names)

	calls := callsByVolume(t, ctx)
	perNode := map[string]int{}
	for _, name := range names {
		b := got[name]
		vol, sel := lab.VolumeName(b.claim), b.claim.Annotations[lab.AnnSelectedNode]
		if sel == "" {
			t.Errorf("claim %s: Bound without selected-node", name)
		}
		pvn, err := pvNode(b.pv)
		if err != nil {
			t.Error(err)
		} else if pvn != sel {
			t.Errorf("claim %s: PV %s on %s, the claim is selected for %s", name, b.pv.Name, pvn, sel)
		}
		perNode[pvn]++
		total := 0
		for node, recs := range calls[vol] {
			total += len(recs)
			if node != sel {
				t.Errorf("claim %s (selected for %s): the driver of %s got CreateVolume for it: %+v", name, sel, node, recs)
			}
		}
		if total != 1 {
			t.Errorf("claim %s: %d CreateVolume calls over all drivers, want exactly 1: %+v", name, total, calls[vol])
		} else if r := calls[vol][sel]; len(r) == 1 && r[0].Code != "OK" {
			t.Errorf("claim %s: its one CreateVolume failed: %+v", name, r[0])
		}
	}
	t.Logf("volumes per node: %s", countBy(perNode))
	if len(perNode) < 2 {
		t.Errorf("all %d Immediate claims on %s: the nodes' provisioners did not share them", n, countBy(perNode))
	}
}

// Kill -9 of one node's driver. A claim selected for that node is
// handed back by the node's provisioner and Bound on another node; once the
// heartbeat Lease has expired (TTL 4 s) no new pod with a WaitForFirstConsumer
// claim is placed on the node, with CSIDriverNotLive and the driver's name
// in the pod's condition and a FailedScheduling event; once the driver is
// back the node takes pods again, and its provisioner provisions for them.
func TestDriverKilledClaimHandedBack(t *testing.T) {
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	n := nl.Node(nl.Names[2])
	t.Cleanup(func() {
		if err := n.EnsureDriver(); err != nil {
			t.Errorf("restarting the driver of %s: %v", n.Name, err)
		}
	})
	var handback *v1.PersistentVolumeClaim
	var other string
	// The figure the node's object settles on before the test: its
	// driver's free bytes.
	var before int64
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		seg, err := nl.Segment(ctx, n.Name)
		if err != nil {
			return false, nil
		}
		before = publishedFigure(t, ctx, n.Name)
		return before == seg.CapacityBytes-seg.UsedBytes, nil
	}); err != nil {
		t.Fatalf("capacity object of %s never showed its driver's free bytes (%d published): %v", n.Name, before, err)
	}
	out := nl.DriverSilenceWith(t, ctx, ns, classWFFC, n.HeartbeatNode, true, func() {
		// The silent node's capacity object keeps the driver's last
		// figure (docs/node-deployment.md): neither deleted nor zeroed,
		// so that VolumeBinding passes the node and the liveness filter
		// names the cause. The node's instance polls every 3 s and has
		// tried (and failed) to refresh it by now.
		if got := publishedFigure(t, ctx, n.Name); got != before-gi {
			t.Errorf("capacity of %s while its driver is silent: %d bytes, want the last figure %d (%d before the pod while-live)", n.Name, got, before-gi, before)
		}
		// The scheduler selected the node for the claim just before the
		// driver died (the stock annotation, written as kube-scheduler does).
		handback = lab.NewClaim(t, ctx, nl.Cluster, ns, "handback", classWFFC, gi, func(c *v1.PersistentVolumeClaim) { c.Annotations = map[string]string{lab.AnnSelectedNode: n.Name} })
		nl.PodPreferring(t, ctx, ns, "handback", v1.LabelHostname, n.Name)
		var sel string
		if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
			pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "handback", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			sel = pvc.Annotations[lab.AnnSelectedNode]
			return sel != "" && sel != n.Name, nil
		}); err != nil {
			t.Fatalf("claim handback still selected for %q, not handed back from %s: %v\n%s", sel, n.Name, err, lab.Describe(ctx, nl.Cluster, ns))
		}
		other = sel
		b := waitAllBound(t, ctx, ns, []string{"handback"})["handback"]
		if pvn, err := pvNode(b.pv); err != nil {
			t.Error(err)
		} else if pvn != other {
			t.Errorf("claim handback selected for %s, its PV on %s", other, pvn)
		}
		if node := lab.WaitPodNode(t, ctx, nl.Cluster, ns, "handback"); node != other {
			t.Errorf("pod handback on %s, its claim selected for %s", node, other)
		}
		msg := lab.WaitEvent(t, ctx, nl.Cluster, ns, "handback", "Warning ProvisioningFailed:", n.Name)
		t.Logf("claim handed back from %s to %s; event: %s", n.Name, other, msg)
		if p := n.Provisioner(); p.Exited() {
			t.Errorf("the provisioner of %s exited when its driver died: %v (log %s)", n.Name, p.Wait(), p.LogPath())
		} else if m, err := lab.Scrape(ctx, n.HTTPURL+"/metrics"); err != nil {
			t.Error(err)
		} else if v := lab.MetricValue(m, "csi_topology_provisioner_reschedules_total", map[string]string{"reason": "DriverNotLive"}); v < 1 {
			t.Errorf("the provisioner of %s counts %v reschedules for DriverNotLive, want at least 1", n.Name, v)
		}
	})
	t.Logf("pinned pod's condition while the driver was dead: %s", out.Reason)
	if !strings.Contains(out.Reason, "CSIDriverNotLive") {
		t.Errorf("pinned pod's condition %q does not give the reason CSIDriverNotLive", out.Reason)
	}
	if handback == nil {
		return
	}
	vol := lab.VolumeName(handback)
	vols, err := nl.Volumes(ctx, n.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.Name == vol {
			t.Errorf("the driver of %s has a volume for the handed-back claim: %+v", n.Name, v)
		}
	}
	calls := callsByVolume(t, ctx)[vol]
	for node, recs := range calls {
		if node != other {
			t.Errorf("the driver of %s got CreateVolume for the handed-back claim (Bound on %s): %+v", node, other, recs)
		}
	}
	if len(calls[other]) != 1 || calls[other][0].Code != "OK" {
		t.Errorf("the driver of %s got %+v for the handed-back claim, want one successful CreateVolume", other, calls[other])
	}
}

// publishedFigure returns the capacity the node's object of classWFFC
// publishes, -1 without one.
func publishedFigure(t *testing.T, ctx context.Context, node string) int64 {
	t.Helper()
	caps, err := nl.PublishedCapacity(ctx, classWFFC)
	if err != nil {
		t.Fatal(err)
	}
	if len(caps[node]) != 1 || caps[node][0].Capacity == nil {
		return -1
	}
	return caps[node][0].Capacity.Value()
}

// capacityReason matches a pod condition or event that rejects nodes for
// their capacity: the CSITopology plugin's reason, or the stock
// VolumeBinding's.
var capacityReason = regexp.MustCompile(`InsufficientCapacity|did not have enough free storage`)

// Nodes with room for 2 volumes each and 30 pods with
// WaitForFirstConsumer claims created at once: 12 are placed, 2 per node;
// no driver is asked for a volume it has no room for (RESOURCE_EXHAUSTED),
// no node holds more than its capacity, and the other pods stay Pending
// with the capacity as the reason.
func TestFullNodeBurst(t *testing.T) {
	// The capacities come back after the namespace is gone (cleanups run
	// last first): the pending pods must not take the room meanwhile.
	old := map[string]int64{}
	t.Cleanup(func() {
		for node, bytes := range old {
			if err := nl.SetCapacity(context.Background(), node, bytes); err != nil {
				t.Errorf("restoring the capacity of %s: %v", node, err)
			}
		}
	})
	ctx, ns := lab.NewNamespaceCleanup(t, nl.Cluster, "e2enode-", deleteNamespace(t))
	const perNode, pods = 2, 30
	size := gi
	for _, node := range nl.Names {
		seg, err := nl.Segment(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		old[node] = seg.CapacityBytes
		if err := nl.SetCapacity(ctx, node, seg.UsedBytes+perNode*size); err != nil {
			t.Fatal(err)
		}
	}
	var published map[string]int64
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		caps, err := nl.PublishedCapacity(ctx, classWFFC)
		if err != nil {
			return false, nil
		}
		published = map[string]int64{}
		done := true
		for _, node := range nl.Names {
			if len(caps[node]) != 1 || caps[node][0].Capacity == nil {
				done = false
				continue
			}
			published[node] = caps[node][0].Capacity.Value()
			done = done && published[node] == perNode*size
		}
		return done, nil
	}); err != nil {
		t.Fatalf("published capacity %v, want %d bytes on each node: %v", published, perNode*size, err)
	}
	checkCapacityOwners(t, ctx)

	var names []string
	for i := 0; i < pods; i++ {
		name := fmt.Sprintf("burst-%02d", i)
		nl.ClaimAndPod(t, ctx, ns, classWFFC, name, size, "")
		names = append(names, name)
	}
	room := perNode * len(nl.Names)
	start := time.Now()
	var placed, rejected int
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		placed, rejected = burstState(ctx, ns, names)
		return placed == room && rejected == pods-room, nil
	}); err != nil {
		t.Fatalf("%d pods placed (want %d), %d Pending for capacity (want %d): %v\n%s", placed, room, rejected, pods-room, err, lab.Describe(ctx, nl.Cluster, ns))
	}
	t.Logf("%d placed, %d Pending for capacity after %s", placed, rejected, time.Since(start).Round(100*time.Millisecond))
	// One more scheduling cycle after the burst settled: a new pod is
	// rejected for capacity too, and the pending ones stayed pending.
	nl.ClaimAndPod(t, ctx, ns, classWFFC, "after-burst", size, "")
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods(ns).Get(ctx, "after-burst", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if pod.Spec.NodeName != "" {
			return false, fmt.Errorf("pod after-burst placed on %s, which should be full", pod.Spec.NodeName)
		}
		c := podScheduled(pod)
		return c != nil && c.Status == v1.ConditionFalse && capacityReason.MatchString(c.Message), nil
	}); err != nil {
		t.Errorf("pod after-burst: %v\n%s", err, lab.Describe(ctx, nl.Cluster, ns))
	}
	if placed, rejected = burstState(ctx, ns, names); placed != room || rejected != pods-room {
		t.Errorf("after one more cycle: %d placed, %d Pending for capacity; want %d and %d", placed, rejected, room, pods-room)
	}

	// The drivers: nobody was asked for what did not fit.
	got, err := boundClaims(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]string{} // volume name -> claim
	pvcs, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pvcs.Items {
		c := &pvcs.Items[i]
		ours[lab.VolumeName(c)] = c.Name
		if _, ok := got[c.Name]; !ok && c.Annotations[lab.AnnSelectedNode] != "" {
			t.Errorf("pending claim %s selected for %s", c.Name, c.Annotations[lab.AnnSelectedNode])
		}
	}
	perNodeBound := map[string]int{}
	for _, b := range got {
		node, err := pvNode(b.pv)
		if err != nil {
			t.Error(err)
			continue
		}
		perNodeBound[node]++
	}
	t.Logf("volumes per node: %s", countBy(perNodeBound))
	for node, n := range perNodeBound {
		if n > perNode {
			t.Errorf("node %s holds %d of the burst's volumes, room for %d", node, n, perNode)
		}
	}
	all, err := nl.AllCreateRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for node, recs := range all {
		for _, r := range recs {
			if claim, ok := ours[r.Name]; ok && r.Code != "OK" {
				t.Errorf("the driver of %s answered %s to CreateVolume of claim %s: %s", node, r.Code, claim, r.Result)
			}
		}
		seg, err := nl.Segment(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		if seg.UsedBytes > seg.CapacityBytes {
			t.Errorf("node %s overcommitted: %d bytes used of %d", node, seg.UsedBytes, seg.CapacityBytes)
		}
	}
}

// burstState counts the burst's pods placed (on a node, claim Bound) and
// those Pending with a capacity reason in their PodScheduled condition.
func burstState(ctx context.Context, ns string, names []string) (placed, rejected int) {
	got, err := boundClaims(ctx, ns)
	if err != nil {
		return 0, 0
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !want[p.Name] {
			continue
		}
		if _, ok := got[p.Name]; ok && p.Spec.NodeName != "" {
			placed++
			continue
		}
		if c := podScheduled(p); p.Spec.NodeName == "" && c != nil && c.Status == v1.ConditionFalse && capacityReason.MatchString(c.Message) {
			rejected++
		}
	}
	return placed, rejected
}

// checkCapacityOwners checks the contract's CSIStorageCapacity objects of
// node deployment: each node's instance labels its objects with the driver
// and csi-topology-provisioner-<node>, owned by the Node.
func checkCapacityOwners(t *testing.T, ctx context.Context) {
	t.Helper()
	caps, err := nl.PublishedCapacity(ctx, classWFFC)
	if err != nil {
		t.Fatal(err)
	}
	if len(caps[""]) > 0 {
		t.Errorf("%d capacity objects of %s for no single node: %+v", len(caps[""]), classWFFC, caps[""])
	}
	for _, node := range nl.Names {
		for _, c := range caps[node] {
			if c.Labels["csi.storage.k8s.io/drivername"] != lab.DriverName || c.Labels["csi.storage.k8s.io/managed-by"] != "external-provisioner-"+node {
				t.Errorf("capacity object %s of %s: labels %v", c.Name, node, c.Labels)
			}
			if len(c.OwnerReferences) != 1 || c.OwnerReferences[0].Kind != "Node" || c.OwnerReferences[0].Name != node {
				t.Errorf("capacity object %s of %s: owners %+v, want the Node", c.Name, node, c.OwnerReferences)
			}
		}
	}
}

// TestCapacityObjectsGoWithNode: a node's instance publishes the capacity
// objects of its node only, owned by its Node; when the node is removed for
// good, the garbage collector deletes them, and the other nodes' objects
// stay.
func TestCapacityObjectsGoWithNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const name = "node-gone"
	n, err := nl.AddNode(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = nl.RemoveNode(context.WithoutCancel(ctx), name)
		}
	})
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var objs []storagev1.CSIStorageCapacity
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		caps, err := nl.PublishedCapacity(ctx, classWFFC)
		objs = caps[name]
		return err == nil && len(objs) == 1, nil
	}); err != nil {
		t.Fatalf("capacity object of %s: %v (have %v)", name, err, objs)
	}
	obj := objs[0]
	if len(obj.OwnerReferences) != 1 || obj.OwnerReferences[0].Kind != "Node" || obj.OwnerReferences[0].UID != node.UID ||
		obj.Labels["csi.storage.k8s.io/managed-by"] != "external-provisioner-"+name {
		t.Errorf("capacity object %s: owners %+v, labels %v; want the Node %s (%s) and managed-by of the node", obj.Name, obj.OwnerReferences, obj.Labels, name, node.UID)
	}
	t.Logf("%s published %s (%s) for its node; provisioner log %s", name, obj.Name, obj.Capacity, n.Provisioner().LogPath())

	if err := nl.RemoveNode(ctx, name); err != nil {
		t.Fatal(err)
	}
	removed = true
	if err := nl.Cluster.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := client.StorageV1().CSIStorageCapacities(obj.Namespace).Get(ctx, obj.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("capacity object %s of the deleted node %s still there: %v", obj.Name, name, err)
	}
	caps, err := nl.PublishedCapacity(ctx, classWFFC)
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range nl.Names {
		if len(caps[other]) != 1 {
			t.Errorf("node %s has %d capacity objects after %s went, want 1", other, len(caps[other]), name)
		}
	}
}
