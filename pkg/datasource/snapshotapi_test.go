package datasource

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/sourceprotection"
)

// testDriver is the CSI driver the tests' sources belong to.
const testDriver = "test.csi.example.com"

// noWatchList tells the informers that the snapshot fake clientset (built
// by an older client-gen) does not support watch-list semantics.
type noWatchList struct{ *snapfake.Clientset }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// contentsLog is the start of the line that says, once, that contents are
// read with a GET.
const contentsLog = "VolumeSnapshotContents may not be watched (RBAC)"

// TestSnapshotContentsWithoutWatch: where RBAC grants get and list but not
// watch on VolumeSnapshotContents (upstream's rbac.yaml), the snapshot API
// is ready without a content informer (which would list again after every
// refused watch) and a restore reads its content with a GET, said once.
func TestSnapshotContentsWithoutWatch(t *testing.T) {
	for _, tc := range []struct {
		name         string
		watchRefused bool
		// wantLists is how many LISTs of contents the API gets: the
		// probe's, and the informer's.
		wantLists int32
		wantGets  bool
		wantLogs  int
	}{
		{name: "watch granted: informer", wantLists: 2},
		{name: "watch refused: GET per restore", watchRefused: true, wantLists: 1, wantGets: true, wantLogs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
			defer cancel()
			cs := snapfake.NewSimpleClientset()
			var lists, gets atomic.Int32
			cs.PrependReactor("list", "volumesnapshotcontents", func(k8stesting.Action) (bool, runtime.Object, error) {
				lists.Add(1)
				return false, nil, nil
			})
			cs.PrependReactor("get", "volumesnapshotcontents", func(k8stesting.Action) (bool, runtime.Object, error) {
				gets.Add(1)
				return false, nil, nil
			})
			if tc.watchRefused {
				cs.PrependWatchReactor("volumesnapshotcontents", func(k8stesting.Action) (bool, watch.Interface, error) {
					return true, nil, apierrors.NewForbidden(snapv1.Resource("volumesnapshotcontents"), "",
						errors.New(`User "system:serviceaccount:default:csi-provisioner" cannot watch resource "volumesnapshotcontents"`))
				})
			}
			// Ahead of the refusal: counts every watch asked for.
			var watches atomic.Int32
			cs.PrependWatchReactor("volumesnapshotcontents", func(k8stesting.Action) (bool, watch.Interface, error) {
				watches.Add(1)
				return false, nil, nil
			})
			client := noWatchList{cs}
			sw := NewSnapshotAPI(client, sourceprotection.NewSnapshotInformers(client, 0), time.Hour)
			api := sw.API()
			go api.Run(ctx)
			if !api.WaitReady(ctx, 10*time.Second) {
				t.Fatalf("snapshot API not ready: %v", api.State())
			}
			// The fake's watch (of an older client-gen) does not pass on
			// what was made before it opened: wait for the probe's watch
			// and, where granted, the informer's, as many as the LISTs.
			// (The reactor runs under the fake's lock, ahead of the one
			// that registers the watch.)
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return watches.Load() >= tc.wantLists, nil
			}); err != nil {
				t.Fatalf("%d watches of contents, want %d: %v", watches.Load(), tc.wantLists, err)
			}
			// A content made after the API is ready, as a restore's is.
			if _, err := cs.SnapshotV1().VolumeSnapshotContents().Create(ctx, &snapv1.VolumeSnapshotContent{
				ObjectMeta: metav1.ObjectMeta{Name: "content-1"}, Spec: snapv1.VolumeSnapshotContentSpec{Driver: testDriver}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				c, err := sw.Content(ctx, "content-1")
				return err == nil && c.Spec.Driver == testDriver, nil
			}); err != nil {
				t.Fatalf("content not readable: %v", err)
			}
			// Probing again (the API was missing, then found) says nothing
			// new.
			if err := sw.probe(ctx); err != nil {
				t.Fatal(err)
			}
			if n := lists.Load(); n != tc.wantLists+1 {
				t.Errorf("%d LISTs of contents, want %d and the second probe's", n, tc.wantLists)
			}
			if got := gets.Load() > 0; got != tc.wantGets {
				t.Errorf("content read with a GET: %t, want %t", got, tc.wantGets)
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if n := strings.Count(logs, contentsLog); n != tc.wantLogs {
				t.Errorf("%q logged %d times, want %d:\n%s", contentsLog, n, tc.wantLogs, logs)
			}
		})
	}
}
