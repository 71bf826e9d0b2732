package scheduler

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	snaplisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
)

// SnapshotInformer follows VolumeSnapshots as an optional API: while they
// are not served a restore waits (ErrSnapshotsNotServed), and the log says
// so once; while they may not be listed the rule is off (no claim, no
// error); its source answers from the informer once synced.
func TestSnapshotInformer(t *testing.T) {
	gr := schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshots"}
	tests := []struct {
		name    string
		listErr error
		want    optionalapi.State
		wantLog string
		wantErr error
	}{
		{name: "CRDs not installed", listErr: apierrors.NewNotFound(gr, ""), want: optionalapi.NotServed,
			wantLog: "Optional API not served", wantErr: ErrSnapshotsNotServed},
		{name: "not allowed", listErr: apierrors.NewForbidden(gr, "", errors.New("RBAC")), want: optionalapi.Forbidden,
			wantLog: "Optional API may not be listed"},
		{name: "API down", listErr: errors.New("connection refused"), want: optionalapi.Unknown, wantErr: ErrSnapshotsNotServed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
			defer cancel()
			client := snapfake.NewSimpleClientset(snapshot("snap", ptr.To("src")))
			var lists atomic.Int32
			client.PrependReactor("list", "volumesnapshots", func(k8stesting.Action) (bool, runtime.Object, error) {
				lists.Add(1)
				return true, nil, tc.listErr
			})
			s := SnapshotInformer(client)
			go s.API.Run(ctx)
			if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				// The state changes just before its log line is written.
				logged := tc.wantLog == "" || strings.Contains(logger.GetSink().(ktesting.Underlier).GetBuffer().String(), tc.wantLog)
				return lists.Load() > 0 && s.API.State() == tc.want && logged, nil
			}); err != nil {
				t.Fatalf("state %v, want %v", s.API.State(), tc.want)
			}
			if got, err := s.Source.SnapshotClaim("ns", "snap"); got != "" || !errors.Is(err, tc.wantErr) {
				t.Errorf("SnapshotClaim(snap) = %q, %v; want \"\", %v", got, err, tc.wantErr)
			}
			if tc.wantLog != "" {
				cancel()
				buf := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
				if strings.Count(buf, tc.wantLog) != 1 {
					t.Errorf("log %q, want %q once", buf, tc.wantLog)
				}
			}
		})
	}
}

// A synced lister answers with the snapshot's claim, none for a snapshot
// of a pre-provisioned content, and ErrSnapshotNotFound for an unknown one.
func TestSnapshotSource(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range []any{snapshot("snap", ptr.To("src")), snapshot("pre", nil)} {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	source := NewSnapshotSource(snaplisters.NewVolumeSnapshotLister(idx))
	for _, tc := range []struct {
		name, snap, want string
		wantErr          error
	}{
		{name: "of a claim", snap: "snap", want: "src"},
		{name: "of a pre-provisioned content", snap: "pre"},
		{name: "unknown", snap: "unknown", wantErr: ErrSnapshotNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := source.SnapshotClaim("ns", tc.snap); got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("SnapshotClaim(%s) = %q, %v; want %q, %v", tc.snap, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
