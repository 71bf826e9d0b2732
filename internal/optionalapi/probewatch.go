package optionalapi

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// ProbeWatch opens a watch the way an informer would after its list, and
// closes it at once: RBAC may grant list and not watch, and an informer
// refused its watch would list everything again and again. Probes call it
// after their LIST, with the list's resource version.
func ProbeWatch(ctx context.Context, watch func(context.Context, metav1.ListOptions) (watch.Interface, error), resourceVersion string) error {
	timeout := int64(1)
	w, err := watch(ctx, metav1.ListOptions{ResourceVersion: resourceVersion, TimeoutSeconds: &timeout, AllowWatchBookmarks: true})
	if err != nil {
		return err
	}
	w.Stop()
	return nil
}
