// Package fakewatch helps unit tests that start informers on client-go's
// fake clientsets. The fakes' watch has no history: what a test changes
// between an informer's list and its watch is lost if it is a delete, and
// arrives only in its final state otherwise (the snapshot fake, which opens
// its watch without list options, loses creates and updates too). Under
// load the informer's watch can come well after WaitForCacheSync returns.
package fakewatch

import (
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
)

// Opened returns a function that waits until a watch of each of resources
// (plural names: "persistentvolumes") has been opened on the fake f; call
// Opened before the informers start and the function after their caches
// synced, before the test changes objects. The reactor runs under the
// fake's lock, ahead of the one that registers the watch, so a change the
// test makes after the wait reaches the watch.
func Opened(t testing.TB, f *k8stesting.Fake, resources ...string) func() {
	t.Helper()
	opened := map[string]chan struct{}{}
	for _, r := range resources {
		opened[r] = make(chan struct{})
	}
	var once sync.Map
	f.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		r := a.GetResource().Resource
		if ch, ok := opened[r]; ok {
			if _, done := once.LoadOrStore(r, true); !done {
				close(ch)
			}
		}
		return false, nil, nil
	})
	return func() {
		t.Helper()
		for _, r := range resources {
			select {
			case <-opened[r]:
			case <-time.After(30 * time.Second):
				t.Fatalf("no watch of %s opened in 30 s", r)
			}
		}
	}
}
