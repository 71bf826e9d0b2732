package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// CSI migration: profileMigration's driver on both sides is a migration
// target, ebs.csi.aws.com, which takes over the in-tree plugin
// kubernetes.io/aws-ebs. Both provisioners would serve the claims of the
// same classes, so the two sides run one after the other, each with a
// fresh mock controller of that name (see runMigration).
const (
	profileMigration profile = "migration"
	ebsDriver                = "ebs.csi.aws.com"
	ebsInTree                = "kubernetes.io/aws-ebs"
	ebsZoneKey               = "topology.ebs.csi.aws.com/zone"
)

// ebsZones are the migration target's names of the cluster's zones: AWS
// zone names, from which the translation to the in-tree plugin derives
// the region label (a name such as z1 fails it).
var ebsZones = map[string]string{"z1": "us-east-1a", "z2": "us-east-1b", "z3": "us-east-1c"}

// migrationCases: classes of the in-tree plugin (in-tree parameters,
// allowedTopologies with the well-known zone label, the zone and zones
// parameters, both at once, delayed binding, block), a class of the
// driver itself, and a PV the in-tree plugin provisioned, released and
// deleted through the driver.
func migrationCases() []tcase {
	inTree := func(params map[string]string, zones ...string) classSpec {
		return classSpec{provisioner: ebsInTree, params: params, allowedZones: zones, zoneLabel: v1.LabelTopologyZone}
	}
	cs := []tcase{
		{name: "migration/in-tree-class", class: inTree(map[string]string{"type": "gp3", "fsType": "ext4"}, ebsZones["z2"])},
		{name: "migration/in-tree-zone-parameter", class: inTree(map[string]string{"type": "io1", "iopsPerGB": "10", "fsType": "xfs", "zone": ebsZones["z3"]})},
		{name: "migration/in-tree-zones-parameter", class: inTree(map[string]string{"zones": ebsZones["z1"] + "," + ebsZones["z2"], "encrypted": "true"})},
		{name: "migration/in-tree-zone-and-allowed", want: wantFailed, class: inTree(map[string]string{"zone": ebsZones["z1"]}, ebsZones["z1"])},
		{name: "migration/in-tree-wffc", podZone: "z2", class: func() classSpec { c := inTree(map[string]string{"type": "gp2"}); c.wffc = true; return c }()},
		{name: "migration/in-tree-block", claim: claimSpec{block: true}, class: inTree(map[string]string{"type": "gp3", "fsType": "ext4"})},
		{name: "migration/csi-class", class: classSpec{params: map[string]string{"type": "gp3", csiPrefix + "fstype": "ext4"}}},
		{name: "migration/in-tree-pv-deleted", static: true, class: inTree(map[string]string{"type": "gp3"})},
	}
	for i := range cs {
		cs[i].profile = profileMigration
		if cs[i].want == "" {
			cs[i].want, cs[i].del = wantBound, &deleteSpec{}
		}
	}
	return cs
}

// runMigration runs the migration cases on ours, then on upstream (each
// side's driver and provisioner run only during its turn, and every claim
// and PV of a turn is gone before the next), and returns the differences.
func runMigration(t *testing.T, cases []tcase) []difference {
	_, ctx := ktesting.NewTestContext(t)
	obs := make([][]map[string]string, len(sides))
	for i, s := range sides {
		obs[i] = runMigrationSide(t, ctx, cases, s)
		if t.Failed() {
			return nil
		}
	}
	var diffs []difference
	for j, tc := range cases {
		diffs = append(diffs, compare(t, tc, obs[0][j], obs[1][j])...)
	}
	return diffs
}

// runMigrationSide starts side s's driver and provisioner of
// profileMigration, runs every case on it, removes their claims and PVs
// and stops them.
func runMigrationSide(t *testing.T, ctx context.Context, cases []tcase, s side) []map[string]string {
	in, err := env.start(ctx, profileMigration, s, profileSpec{})
	defer in.stop()
	if err != nil {
		t.Fatalf("starting %s's migration driver: %v", s.name, err)
	}
	out := make([]map[string]string, len(cases))
	errs := make([]error, len(cases))
	runs := make([]*run, len(cases))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for j, tc := range cases {
		runs[j] = newRun(t, ctx, tc, fmt.Sprintf("cfm-%03d", j), s, in)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[j], errs[j] = runs[j].execute(ctx)
		}()
	}
	wg.Wait()
	for j, err := range errs {
		if err != nil {
			t.Errorf("%s (%s): %v", cases[j].name, s.name, err)
		}
	}
	if err := drain(ctx, runs); err != nil {
		t.Errorf("removing the claims and PVs of %s's migration cases: %v", s.name, err)
	}
	return out
}

// drain deletes the pods and claims of the runs' namespaces and waits
// until they and their PVs are gone (the provisioner deletes the PVs).
func drain(ctx context.Context, runs []*run) error {
	c := env.client
	for _, r := range runs {
		opts := metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}
		if err := c.CoreV1().Pods(r.ns).DeleteCollection(ctx, opts, metav1.ListOptions{}); err != nil {
			return err
		}
		if err := c.CoreV1().PersistentVolumeClaims(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return err
		}
	}
	left := map[string]bool{}
	for _, r := range runs {
		left[r.ns] = true
	}
	return env.cluster.WaitFor(ctx, caseTimeout, func(ctx context.Context) (bool, error) {
		pvs, err := c.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && left[pv.Spec.ClaimRef.Namespace] {
				return false, nil
			}
		}
		for ns := range left {
			pvcs, err := c.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil || len(pvcs.Items) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

// inTreePV creates, in the side's driver, the volume "static-<ns>" in
// us-east-1a (z1), and a PV of the in-tree plugin for it, pre-bound to the claim "data"
// of the case's class, as the in-tree plugin had provisioned it (its
// provisioned-by annotation, its zone in the node affinity).
func (r *run) inTreePV(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+r.inst.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := csi.NewControllerClient(conn).CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "static-" + r.ns, CapacityRange: &csi.CapacityRange{RequiredBytes: gi},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{ebsZoneKey: ebsZones["z1"]}}}},
	})
	if err != nil {
		return fmt.Errorf("CreateVolume static-%s: %w", r.ns, err)
	}
	_, err = env.client.CoreV1().PersistentVolumes().Create(ctx, &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: r.ns + "-static", Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": ebsInTree}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			StorageClassName:              r.className(),
			ClaimRef:                      &v1.ObjectReference{Namespace: r.ns, Name: "data"},
			PersistentVolumeSource: v1.PersistentVolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{
				VolumeID: "aws://" + ebsZones["z1"] + "/" + resp.GetVolume().GetVolumeId(), FSType: "ext4"}},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelTopologyZone, Operator: v1.NodeSelectorOpIn, Values: []string{ebsZones["z1"]}}}}}}},
		},
	}, metav1.CreateOptions{})
	return err
}
