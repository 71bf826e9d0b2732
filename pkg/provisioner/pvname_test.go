package provisioner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/classparams"
	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/inflight"
)

// testUID is a claim UID of the API server's form; cut to ten characters
// without dashes it is dda3c384b8.
const testUID = types.UID("dda3c384-b8e2-4f7a-9c1d-0123456789ab")

// namedClaim is claim "data" of class "zonal", selected for n1, with
// testUID.
func namedClaim() claimBuilder {
	c := makePVC("data", "zonal").withSelectedNode("n1")
	c.UID = testUID
	return c
}

// TestProvisionNamesPVAfterVolume: the PV, csi.storage.k8s.io/pv/name and
// ${pv.name} in secret templates take the volume's name,
// <--volume-name-prefix>-<UID cut to --volume-name-uuid-length>, as
// upstream external-provisioner v6.3.0 names them.
func TestProvisionNamesPVAfterVolume(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		length int
		want   string
	}{
		{name: "defaults", length: -1, want: "pvc-" + string(testUID)},
		{name: "prefix only", prefix: "k8s", length: -1, want: "k8s-" + string(testUID)},
		{name: "prefix and length", prefix: "k8s", length: 10, want: "k8s-dda3c384b8"},
		{name: "length beyond the UID", prefix: "k8s", length: 40, want: "k8s-dda3c384b8e24f7a9c1d0123456789ab"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim := namedClaim()
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, ExtraCreateMetadata: true, VolumeNamePrefix: tc.prefix,
				VolumeNameUUIDLength: tc.length}, nodes: threeZones, records: true, objs: []runtime.Object{claim.PersistentVolumeClaim}})
			class := makeClass("zonal").WithParams(
				"csi.storage.k8s.io/node-publish-secret-name", "${pv.name}",
				"csi.storage.k8s.io/node-publish-secret-namespace", "${pvc.namespace}")
			// The library's name, which Provision must not use.
			pv, _, err := e.provision(t, claim.PersistentVolumeClaim, class.StorageClass, makeNode("n1", "z1"))
			if err != nil {
				t.Fatal(err)
			}
			req := e.csi.lastCreate(t)
			secret := pv.Spec.CSI.NodePublishSecretRef
			if secret == nil {
				t.Fatal("PV has no node-publish secret")
			}
			got := map[string]string{
				"volume":                 req.GetName(),
				"PV":                     pv.Name,
				classparams.PVNameKey:    req.GetParameters()[classparams.PVNameKey],
				"node-publish secret":    secret.Name,
				"volume in the driver":   e.volumeNames()[0],
				"node-publish namespace": secret.Namespace,
			}
			for what, name := range got {
				want := tc.want
				if what == "node-publish namespace" {
					want = "apps"
				}
				if name != want {
					t.Errorf("%s = %q, want %q", what, name, want)
				}
			}
		})
	}
}

// TestProvisionRetryMakesNoSecondVolume: the library looks for a claim's PV
// only by its own name pvc-<UID>; with another volume name its retry, or a
// restart (with the same or other name flags), reaches Provision, which finds
// the PV by the claim's UID and creates no second volume or PV.
func TestProvisionRetryMakesNoSecondVolume(t *testing.T) {
	claim := namedClaim()
	class := makeClass("zonal").StorageClass
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, VolumeNamePrefix: "k8s", VolumeNameUUIDLength: 10}, nodes: threeZones,
		records: true, objs: []runtime.Object{claim.PersistentVolumeClaim, class}})
	pv, _, err := e.provision(t, claim.PersistentVolumeClaim, class, makeNode("n1", "z1"))
	if err != nil {
		t.Fatal(err)
	}
	if pv.Name != "k8s-dda3c384b8" {
		t.Fatalf("PV name %q, want k8s-dda3c384b8", pv.Name)
	}
	// The library stores the PV with the claim's reference; the claim is
	// not bound yet (no PV controller here), so the library tries again.
	pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "apps", Name: "data", UID: testUID}
	if _, err := e.client.CoreV1().PersistentVolumes().Create(e.ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(e.p.deps.ClaimVolumes.Of(testUID)) == 1, nil
	}); err != nil {
		t.Fatalf("the PV did not reach the informer: %v", err)
	}
	for _, tc := range []struct {
		name   string
		prefix string
		length int
	}{
		{name: "retry", prefix: "k8s", length: 10},
		{name: "restart with the default names", length: -1},
		{name: "restart with another prefix", prefix: "vol", length: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.p.cfg
			cfg.VolumeNamePrefix, cfg.VolumeNameUUIDLength = tc.prefix, tc.length
			p, err := New(cfg, e.p.deps)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := p.Provision(e.ctx, controller.ProvisionOptions{StorageClass: class, PVName: "pvc-" + string(testUID),
				PVC: claim.PersistentVolumeClaim, SelectedNode: makeNode("n1", "z1")})
			var ignored *controller.IgnoredError
			if !errors.As(err, &ignored) || got != nil {
				t.Errorf("Provision: PV %v, error %v; want none and an IgnoredError (the claim has a PV)", got, err)
			}
		})
	}
	if n := len(e.csi.creates); n != 1 {
		t.Errorf("%d CreateVolume calls, want 1", n)
	}
	if names := e.volumeNames(); len(names) != 1 {
		t.Errorf("driver volumes %v, want one", names)
	}
}

// TestProvisionRefusesNameOfAnotherClaim: a live PV of the volume's name
// that refers to another claim (two UIDs with the same first characters)
// fails the provision before any CreateVolume, which would return that
// claim's volume.
func TestProvisionRefusesNameOfAnotherClaim(t *testing.T) {
	claim := namedClaim()
	other := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "k8s-dda3c384b8"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "vol-other"}},
		ClaimRef:               &v1.ObjectReference{Namespace: "apps", Name: "other", UID: "dda3c384-b8ff-0000-0000-000000000000"}}}
	e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, VolumeNamePrefix: "k8s", VolumeNameUUIDLength: 10}, nodes: threeZones,
		records: true, objs: []runtime.Object{claim.PersistentVolumeClaim, other}})
	pv, _, err := e.provision(t, claim.PersistentVolumeClaim, makeClass("zonal").StorageClass, makeNode("n1", "z1"))
	if !errors.Is(err, errVolumeNameTaken) || pv != nil {
		t.Fatalf("Provision: PV %v, error %v; want %v", pv, err, errVolumeNameTaken)
	}
	if !strings.Contains(err.Error(), "apps/other") {
		t.Errorf("error %q does not name the claim that holds the name", err)
	}
	if n := len(e.csi.creates); n != 0 {
		t.Errorf("%d CreateVolume calls, want none", n)
	}
}

// TestGuardLeavesAnotherClaimsVolume: when the driver returned another
// claim's volume for a name both claims share, the PV create finds that
// claim's PV of the same handle; the volume is not deleted, whatever the
// state of that PV.
func TestGuardLeavesAnotherClaimsVolume(t *testing.T) {
	pvOf := func(uid types.UID, phase v1.PersistentVolumePhase) *v1.PersistentVolume {
		return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "k8s-dda3c384b8"}, Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "vol-1"}},
			ClaimRef:               &v1.ObjectReference{Namespace: "apps", Name: "data", UID: uid}},
			Status: v1.PersistentVolumeStatus{Phase: phase}}
	}
	tests := []struct {
		name     string
		existing *v1.PersistentVolume
	}{
		{name: "bound to the other claim", existing: pvOf("dda3c384-b8ff-0000-0000-000000000000", v1.VolumeBound)},
		{name: "released by the other claim (Retain)", existing: pvOf("dda3c384-b8ff-0000-0000-000000000000", v1.VolumeReleased)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, VolumeNamePrefix: "k8s", VolumeNameUUIDLength: 10}, nodes: threeZones,
				records: true, objs: []runtime.Object{tc.existing}})
			rec := record.NewFakeRecorder(10)
			client := withRecordGuard(e.client, e.p, rec)
			_, err := client.CoreV1().PersistentVolumes().Create(e.ctx, pvOf(testUID, ""), metav1.CreateOptions{})
			if err == nil {
				t.Fatal("Create succeeded over an existing PV")
			}
			if slices.ContainsFunc(e.csi.deletes, func(r *csi.DeleteVolumeRequest) bool { return r.VolumeId == "vol-1" }) {
				t.Error("the other claim's volume was deleted")
			}
			select {
			case ev := <-rec.Events:
				if !strings.Contains(ev, inflight.ReasonVolumeNameTaken) || !strings.Contains(ev, "left alone") {
					t.Errorf("event %q, want %s saying the volume was left alone", ev, inflight.ReasonVolumeNameTaken)
				}
			default:
				t.Errorf("no %s event", inflight.ReasonVolumeNameTaken)
			}
			if d, _ := e.p.deps.Decisions.Take(testUID); !d.NameTaken {
				t.Errorf("decision %+v, want NameTaken (no ProvisioningSucceeded Event)", d)
			}
		})
	}
}

// TestRecordKeeperFindsPVByClaim: a claim's in-flight record goes once a
// PV refers to it, whatever the PV's name: the volume's name under the
// name flags, or pvc-<UID> of an older build.
func TestRecordKeeperFindsPVByClaim(t *testing.T) {
	for _, pvName := range []string{"k8s-dda3c384b8", "pvc-" + string(testUID)} {
		t.Run(pvName, func(t *testing.T) {
			claim := namedClaim().withRecord()
			pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName},
				Spec: v1.PersistentVolumeSpec{ClaimRef: &v1.ObjectReference{Namespace: "apps", Name: "data", UID: testUID}}}
			e := newEnv(t, envOptions{cfg: Config{SupportsTopology: true, VolumeNamePrefix: "k8s", VolumeNameUUIDLength: 10}, nodes: threeZones,
				records: true, objs: []runtime.Object{claim.PersistentVolumeClaim, pv, makeClass("zonal").StorageClass}})
			startRecordKeeper(t, e)
			if err := wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return !inflight.HasFinalizer(e.claim(t, "apps", "data")), nil
			}); err != nil {
				t.Errorf("the claim keeps its in-flight record although PV %s refers to it", pvName)
			}
		})
	}
}
