package sourceprotection

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// BenchmarkCloneProtection measures the source-protection work one clone
// claim costs (the informer's index update when the clone changes, the
// event handler, the queue, and the in-flight check of its source) with
// 100 and 10 000 claims in the informer, all in one namespace (the worst
// case for a namespace-wide list), one in a hundred of them clones. For
// contrast, "namespace list" is the same check done by listing the
// namespace's claims, as upstream's cloning-protection controller does.
func BenchmarkCloneProtection(b *testing.B) {
	for _, n := range []int{100, 10000} {
		inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.PersistentVolumeClaim{}, 0,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		lister := corelisters.NewPersistentVolumeClaimLister(inf.GetIndexer())
		s, err := New(Config{Claims: inf, ClaimLister: lister})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			c := makePVC(fmt.Sprintf("claim-%d", i))
			c.UID = types.UID(fmt.Sprintf("uid-%d", i))
			c.Spec.VolumeName = "pv-" + c.Name
			if i%100 == 1 {
				c = c.cloneOf(fmt.Sprintf("claim-%d", i-1))
			}
			if err := inf.GetIndexer().Add(c.PersistentVolumeClaim); err != nil {
				b.Fatal(err)
			}
		}
		clone := makePVC("clone").cloneOf("claim-0").PersistentVolumeClaim
		key := Key{Kind: kindClaim, Namespace: "apps", Name: "claim-0"}
		b.Run(fmt.Sprintf("index/pvcs=%d", n), func(b *testing.B) {
			for b.Loop() {
				if err := inf.GetIndexer().Update(clone); err != nil {
					b.Fatal(err)
				}
				s.claimChanged(clone)
				k, _ := s.queue.Get()
				if busy, err := s.hasPendingClaim(k); err != nil || !busy {
					b.Fatalf("in flight = %v, %v", busy, err)
				}
				s.queue.Done(k)
				s.queue.Forget(k)
			}
		})
		b.Run(fmt.Sprintf("namespace list/pvcs=%d", n), func(b *testing.B) {
			for b.Loop() {
				claims, err := lister.PersistentVolumeClaims(key.Namespace).List(labels.Everything())
				if err != nil {
					b.Fatal(err)
				}
				busy := false
				for _, c := range claims {
					if k, ok := claimSourceKey(c); ok && k == key && c.Spec.VolumeName == "" {
						busy = true
					}
				}
				if !busy {
					b.Fatal("clone not found")
				}
			}
		})
		s.queue.ShutDown()
	}
}
