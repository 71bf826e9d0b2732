package scheduler

import (
	"errors"
	"strings"
	"testing"

	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// SnapshotInformer turns the snapshot rule off, with one log line and no
// informer, when VolumeSnapshots are not served or may not be listed; it
// fails on other errors; otherwise its source answers from the factory's
// informer.
func TestSnapshotInformer(t *testing.T) {
	gr := schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshots"}
	tests := []struct {
		name    string
		listErr error
		wantLog string
		wantErr bool
		wantOn  bool
	}{
		{name: "served", wantOn: true},
		{name: "CRDs not installed", listErr: apierrors.NewNotFound(gr, ""), wantLog: "VolumeSnapshots are not served"},
		{name: "not allowed", listErr: apierrors.NewForbidden(gr, "", errors.New("RBAC")), wantLog: "VolumeSnapshots may not be listed"},
		{name: "API down", listErr: errors.New("connection refused"), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx := klog.NewContext(t.Context(), logger)
			client := snapfake.NewSimpleClientset(snapshot("snap", ptr.To("src")), snapshot("pre", nil))
			if tc.listErr != nil {
				client.PrependReactor("list", "volumesnapshots", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.listErr
				})
			}
			factory, source, err := SnapshotInformer(ctx, client)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if (factory != nil) != tc.wantOn || (source != nil) != tc.wantOn {
				t.Fatalf("factory %v, source %v; want on %v", factory, source, tc.wantOn)
			}
			if tc.wantLog != "" {
				buf := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
				if strings.Count(buf, tc.wantLog) != 1 {
					t.Errorf("log %q, want %q once", buf, tc.wantLog)
				}
			}
			if !tc.wantOn {
				return
			}
			// The source reads the factory's informer (not started here: the
			// generated fake clientset does not serve client-go's streaming
			// list, so its informer would never sync).
			idx := factory.Snapshot().V1().VolumeSnapshots().Informer().GetIndexer()
			for _, o := range []any{snapshot("snap", ptr.To("src")), snapshot("pre", nil)} {
				if err := idx.Add(o); err != nil {
					t.Fatal(err)
				}
			}
			if got, ok := source.SnapshotClaim("ns", "snap"); !ok || got != "src" {
				t.Errorf("SnapshotClaim(snap) = %q, %v; want src", got, ok)
			}
			for _, name := range []string{"pre", "unknown"} {
				if got, ok := source.SnapshotClaim("ns", name); ok {
					t.Errorf("SnapshotClaim(%s) = %q, want none", name, got)
				}
			}
		})
	}
}
