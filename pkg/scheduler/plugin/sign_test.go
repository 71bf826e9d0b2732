package plugin

import (
	"bytes"
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	kubescheduler "k8s.io/kubernetes/pkg/scheduler"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"
)

// disabledLine is what kube-scheduler logs when a filter or score plugin of
// a profile cannot sign pods (framework/runtime computeBatchablePlugins).
const disabledLine = "Disabling signatures for profile because plugins do not support it"

// unsigned is the plugin without SignPod, as it was before: the control
// that shows the log capture sees the line.
type unsigned struct{ p *Plugin }

func (u unsigned) Name() string { return Name }
func (u unsigned) PreFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, n []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	return u.p.PreFilter(ctx, cs, pod, n)
}
func (u unsigned) PreFilterExtensions() fwk.PreFilterExtensions { return nil }
func (u unsigned) Filter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) *fwk.Status {
	return u.p.Filter(ctx, cs, pod, ni)
}
func (u unsigned) PreScore(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, n []fwk.NodeInfo) *fwk.Status {
	return u.p.PreScore(ctx, cs, pod, n)
}
func (u unsigned) Score(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	return u.p.Score(ctx, cs, pod, ni)
}
func (u unsigned) ScoreExtensions() fwk.ScoreExtensions { return nil }
func (u unsigned) Reserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, node string) *fwk.Status {
	return u.p.Reserve(ctx, cs, pod, node)
}
func (u unsigned) Unreserve(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, node string) {
	u.p.Unreserve(ctx, cs, pod, node)
}

// builtScheduler is kube-scheduler v1.36 built as csi-topology-scheduler
// builds it (the in-tree registry plus ours) with the profile the mock
// overlay ships, changed by edit (may be nil), over a fake clientset
// holding objs, with its informers synced, and the log it wrote while
// being built.
func builtScheduler(t *testing.T, factory frameworkruntime.PluginFactory, edit func(*schedconfig.KubeSchedulerProfile),
	objs ...runtime.Object) (context.Context, kubescheduler.Scheduler, string) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	t.Cleanup(cancel)
	_, cfg := shippedConfig(t, "../../../deploy/kubernetes/overlays/mock/scheduler-config-patch.yaml")
	if edit != nil {
		for i := range cfg.Profiles {
			edit(&cfg.Profiles[i])
		}
	}
	client := fake.NewClientset(objs...)
	informerFactory := informers.NewSharedInformerFactory(client, 0)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	sched, err := kubescheduler.New(ctx, client, informerFactory, nil, profile.NewRecorderFactory(broadcaster),
		kubescheduler.WithProfiles(cfg.Profiles...),
		kubescheduler.WithFrameworkOutOfTreeRegistry(frameworkruntime.Registry{Name: factory}))
	if err != nil {
		t.Fatal(err)
	}
	informerFactory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		informerFactory.Shutdown()
	})
	informerFactory.WaitForCacheSync(ctx.Done())
	return ctx, *sched, logger.GetSink().(ktesting.Underlier).GetBuffer().String()
}

func claimOf(name string, size string, source *v1.TypedObjectReference) *v1.PersistentVolumeClaim {
	cls := "fast"
	return &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &cls, DataSourceRef: source, Resources: v1.VolumeResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}}}}
}

func podUsing(ns, name string, claims ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.PodSpec{SchedulerName: "csi-topology-scheduler"}}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: c, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

// With CSITopology enabled, kube-scheduler keeps pod signatures
// (opportunistic batching) on; the same scheduler with the plugin stripped
// of SignPod logs that it turns them off.
func TestSignaturesStayOn(t *testing.T) {
	_, _, log := builtScheduler(t, New, nil)
	if strings.Contains(log, disabledLine) {
		t.Errorf("kube-scheduler logged %q with CSITopology enabled:\n%s", disabledLine, log)
	}
	_, _, log = builtScheduler(t, func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		p, err := New(ctx, obj, h)
		if err != nil {
			return nil, err
		}
		return unsigned{p.(*Plugin)}, nil
	}, nil)
	if !strings.Contains(log, disabledLine) || !strings.Contains(log, Name) {
		t.Errorf("control: the plugin without SignPod did not make kube-scheduler log %q naming %s:\n%s", disabledLine, Name, log)
	}
}

// The profile's signature of a pod holds what CSITopology reads: pods that
// share their claims sign alike, and a pod whose claim differs in
// identity, size or data source, or lives in another namespace, signs
// differently. A pod whose claim is missing is not signed. (PodTopologySpread
// with its system default constraints, kube-scheduler's default, refuses to
// sign any pod; the profile here lists no default constraints, as a user
// who wants batching configures it.)
func TestSignPod(t *testing.T) {
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	src := &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
	other := claimOf("data", "1Gi", nil)
	other.Namespace, other.UID = "other", "uid-other-data"
	ctx, sched, _ := builtScheduler(t, New, withoutDefaultSpread,
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: driver, VolumeBindingMode: &mode},
		claimOf("data", "1Gi", nil), claimOf("twin", "1Gi", nil), claimOf("big", "2Gi", nil), claimOf("clone", "1Gi", src), other)
	fw := sched.Profiles["csi-topology-scheduler"]
	if fw == nil {
		t.Fatal("no profile csi-topology-scheduler")
	}
	sign := func(p *v1.Pod) []byte { return fw.SignPod(ctx, p) }
	first := sign(podUsing("ns", "a", "data"))
	if first == nil {
		t.Fatal("pod with a claim of the driver not signed")
	}
	if !bytes.Contains(first, []byte("uid-data")) || !bytes.Contains(first, []byte("class=fast")) {
		t.Errorf("signature %s lacks the claim's identity or class", first)
	}
	if got := sign(podUsing("ns", "b", "data")); !bytes.Equal(got, first) {
		t.Errorf("pods sharing their claim sign differently:\n%s\n%s", first, got)
	}
	for _, p := range []*v1.Pod{podUsing("ns", "c", "twin"), podUsing("ns", "d", "big"), podUsing("ns", "e", "clone"),
		podUsing("other", "f", "data"), podUsing("ns", "g", "data", "twin")} {
		if got := sign(p); got == nil || bytes.Equal(got, first) {
			t.Errorf("pod %s/%s signs %s, want a signature other than %s", p.Namespace, p.Name, got, first)
		}
	}
	if got := sign(podUsing("ns", "h", "missing")); got != nil {
		t.Errorf("pod with a missing claim signed: %s", got)
	}
	if sign(podUsing("ns", "i")) == nil {
		t.Error("pod without claims not signed")
	}
}

// withoutDefaultSpread gives PodTopologySpread no default constraints.
func withoutDefaultSpread(p *schedconfig.KubeSchedulerProfile) {
	for i, pc := range p.PluginConfig {
		if args, ok := pc.Args.(*schedconfig.PodTopologySpreadArgs); ok {
			args = args.DeepCopy()
			args.DefaultingType, args.DefaultConstraints = schedconfig.ListDefaulting, nil
			p.PluginConfig[i].Args = args
		}
	}
}
