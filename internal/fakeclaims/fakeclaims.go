// Package fakeclaims helps unit tests that write claims through client-go's
// fake clientset: a 403 as the API server gives it, a count of the claim
// writes by verb, the API server's resourceVersion rule on UPDATE, which
// the fake does not enforce, and the marks of other controllers on a claim
// that every write must keep. For tests only.
package fakeclaims

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Refusal is a 403 of the API server for a claim: the authorizer's for
// verb, or, with byAuthorizer false, an admission plugin's.
func Refusal(verb string, byAuthorizer bool) error {
	reason := fmt.Errorf(`User "system:serviceaccount:default:csi-provisioner" cannot %s resource "persistentvolumeclaims" in API group "" in the namespace "apps"`, verb)
	if !byAuthorizer {
		reason = errors.New(`admission webhook "policy.example.com" denied the request`)
	}
	return apierrors.NewForbidden(v1.Resource("persistentvolumeclaims"), "data", reason)
}

// Calls counts the PATCHes and UPDATEs of claims the fake API server got.
type Calls struct{ Patches, Updates atomic.Int32 }

// WatchWrites counts the claim writes cs gets; refuse, when set, is the
// answer to every PATCH.
func WatchWrites(cs *fake.Clientset, refuse error) *Calls {
	calls := &Calls{}
	cs.PrependReactor("patch", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls.Patches.Add(1)
		return refuse != nil, nil, refuse
	})
	cs.PrependReactor("update", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls.Updates.Add(1)
		return false, nil, nil
	})
	return calls
}

// EnforceResourceVersion makes cs refuse an UPDATE of a claim whose
// resourceVersion is not the stored one (Conflict), as the API server does,
// and give each stored claim a new one. conflicts, when set, counts down:
// while above zero, every UPDATE conflicts.
func EnforceResourceVersion(cs *fake.Clientset, conflicts *atomic.Int32) {
	cs.PrependReactor("update", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*v1.PersistentVolumeClaim)
		stored, err := cs.Tracker().Get(v1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), obj.Namespace, obj.Name)
		if err != nil {
			return true, nil, err
		}
		current := stored.(*v1.PersistentVolumeClaim).ResourceVersion
		if obj.ResourceVersion != current || (conflicts != nil && conflicts.Add(-1) >= 0) {
			return true, nil, apierrors.NewConflict(v1.Resource("persistentvolumeclaims"), obj.Name, errors.New("the object has been modified"))
		}
		n, _ := strconv.Atoi(current)
		obj.ResourceVersion = strconv.Itoa(n + 1)
		return false, nil, nil
	})
}

// MarkByOthers gives claim what other controllers put on it and every write
// must keep, the finalizer example.com/keep and the annotation
// example.com/keep=yes, and resourceVersion 7, as a stored claim has one.
func MarkByOthers(claim *v1.PersistentVolumeClaim) {
	claim.Finalizers = append(claim.Finalizers, "example.com/keep")
	if claim.Annotations == nil {
		claim.Annotations = map[string]string{}
	}
	claim.Annotations["example.com/keep"] = "yes"
	claim.ResourceVersion = "7"
}
