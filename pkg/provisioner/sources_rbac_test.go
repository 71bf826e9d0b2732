package provisioner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/internal/optionalapi"
)

// forbiddenAPI is an optional API that RBAC refuses to let be listed.
func forbiddenAPI(t *testing.T, ctx context.Context) *optionalapi.API {
	t.Helper()
	api := optionalapi.New(optionalapi.Config{What: "VolumeAttributesClasses", MaxInterval: time.Hour,
		Probe: func(context.Context) error {
			return apierrors.NewForbidden(storagev1.Resource("volumeattributesclasses"), "", errors.New("cannot list"))
		}})
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go api.Run(ctx)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return api.State() == optionalapi.Forbidden, nil
	}); err != nil {
		t.Fatal(err)
	}
	return api
}

// TestAttributesClassWithoutList: where RBAC does not let
// VolumeAttributesClasses be listed and watched, a claim's class is read
// with a GET, as upstream does; where get is refused too, the claim is
// refused with a message that names the rule.
func TestAttributesClassWithoutList(t *testing.T) {
	gold := makeVAC("gold", testDriver, map[string]string{"iops": "5000"})
	class := makeClass("zonal").Immediate().StorageClass
	for _, tc := range []struct {
		name       string
		getRefused bool
		vac        string
		wantParams map[string]string
		wantErr    string
	}{
		{name: "get granted", vac: "gold", wantParams: map[string]string{"iops": "5000"}},
		{name: "get granted, class missing", vac: "silver", wantErr: `VolumeAttributesClass "silver" does not exist`},
		{name: "nothing granted", getRefused: true, vac: "gold",
			wantErr: `may not read VolumeAttributesClass "gold" (RBAC): grant get on volumeattributesclasses`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: sourceCaps, nodes: threeZones, objs: []runtime.Object{gold}, sources: true})
			if tc.getRefused {
				e.client.PrependReactor("get", "volumeattributesclasses", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(storagev1.Resource("volumeattributesclasses"), "gold", errors.New("cannot get"))
				})
			}
			e.p.deps.Sources.AttributesClassAPI = forbiddenAPI(t, e.ctx)
			e.p.deps.Sources.AttributesClassGetter = func(ctx context.Context, name string) (*storagev1.VolumeAttributesClass, error) {
				return e.client.StorageV1().VolumeAttributesClasses().Get(ctx, name, metav1.GetOptions{})
			}
			_, _, err := e.provision(t, makePVC("data", "zonal").withAttributesClass(tc.vac).PersistentVolumeClaim, class, nil)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrAttributesClassRefused) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Provision: %v; want ErrAttributesClassRefused saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Provision: %v", err)
			}
			if diff := cmp.Diff(tc.wantParams, e.csi.lastCreate(t).GetMutableParameters()); diff != "" {
				t.Errorf("mutable parameters (-want +got):\n%s", diff)
			}
		})
	}
}
