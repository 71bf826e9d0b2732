package capacity

import (
	"context"
	"strings"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
)

// capacityGauges is the exposition of the csistoragecapacities_* gauges
// with upstream's names and help.
func capacityGauges(goal, current, obsolete string) string {
	return `# HELP csistoragecapacities_desired_current [ALPHA] Number of CSIStorageCapacity objects that exist and are supposed to be managed automatically.
# TYPE csistoragecapacities_desired_current gauge
csistoragecapacities_desired_current ` + current + `
# HELP csistoragecapacities_desired_goal [ALPHA] Number of CSIStorageCapacity objects that are supposed to be managed automatically.
# TYPE csistoragecapacities_desired_goal gauge
csistoragecapacities_desired_goal ` + goal + `
# HELP csistoragecapacities_obsolete [ALPHA] Number of CSIStorageCapacity objects that exist and will be deleted automatically. Objects that exist and may need an update are not considered obsolete and therefore not included in this value.
# TYPE csistoragecapacities_obsolete gauge
csistoragecapacities_obsolete ` + obsolete + `
`
}

// The csistoragecapacities_* gauges count what a full Sync wants (goal),
// what of that exists (current) and what it would delete (obsolete), with
// the rules of Sync: after a Sync, current is the goal and nothing is
// obsolete.
func TestCapacityCollector(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, csiClient := startMock(t, ctx)
	other := makeClass("other")
	other.Provisioner = "other.example.com"
	obsolete := func(name, managedBy string) *storagev1.CSIStorageCapacity {
		return &storagev1.CSIStorageCapacity{
			ObjectMeta:       metav1.ObjectMeta{Name: name, Namespace: "csi", Labels: map[string]string{labelDriverName: testDriver, labelManagedBy: managedBy}},
			NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{zoneKey: "z1"}},
			StorageClassName: "gone",
		}
	}
	objs := []runtime.Object{makeClass("wffc").StorageClass, makeClass("imm").Immediate().StorageClass, other.StorageClass,
		makeNode("n1", "z1"), makeCSINode("n1", zoneKey), makeNode("n2", "z2"), makeCSINode("n2", zoneKey),
		obsolete("ours-gone", ManagedBy("")),
		// Another instance's object (a node deployment's) is not ours
		// to count or delete.
		obsolete("theirs-gone", ManagedBy("node-1")),
	}
	pe := newPublisherEnv(t, Config{}, csiClient, objs...)
	pe.start(ctx, t)
	reg := metrics.NewKubeRegistry()
	reg.CustomMustRegister(NewCollector(pe.p))
	names := []string{"csistoragecapacities_desired_goal", "csistoragecapacities_desired_current", "csistoragecapacities_obsolete"}

	steps := []struct {
		name string
		do   func() error
		want string
	}{
		{name: "before the first sync", do: func() error { return nil }, want: capacityGauges("2", "0", "1")},
		{name: "after a full sync", do: func() error { return pe.p.Sync(ctx, "") }, want: capacityGauges("2", "2", "0")},
		{name: "after a class of the driver was deleted", do: func() error {
			return pe.client.StorageV1().StorageClasses().Delete(ctx, "wffc", metav1.DeleteOptions{})
		}, want: capacityGauges("0", "0", "2")},
	}
	for _, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		// The informers see the writes shortly.
		var last error
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			last = testutil.GatherAndCompare(reg, strings.NewReader(step.want), names...)
			return last == nil, nil
		}); err != nil {
			t.Errorf("%s: %v", step.name, last)
		}
	}
}
