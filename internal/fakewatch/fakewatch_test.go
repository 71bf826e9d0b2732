package fakewatch

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// After the wait, a delete made right away reaches the informer's handler.
func TestOpened(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	watched := Opened(t, &client.Fake, "persistentvolumes")
	factory := informers.NewSharedInformerFactory(client, 0)
	deleted := make(chan struct{})
	if _, err := factory.Core().V1().PersistentVolumes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(any) { close(deleted) },
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	watched()
	pvs := client.CoreV1().PersistentVolumes()
	if _, err := pvs.Create(ctx, &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pvs.Delete(ctx, "pv", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-deleted:
	case <-time.After(10 * time.Second):
		t.Fatal("the informer did not see the delete")
	}
}
