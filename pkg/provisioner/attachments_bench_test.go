package provisioner

import (
	"fmt"
	"testing"

	"k8s.io/client-go/tools/cache"
)

// BenchmarkAttachmentsForPV measures the check Delete makes before each
// DeleteVolume, with 10 and 10 000 VolumeAttachments in the cluster: the
// index makes it as cheap with either (upstream lists them all).
func BenchmarkAttachmentsForPV(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("attachments=%d", n), func(b *testing.B) {
			idx := &AttachmentIndex{indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{indexAttachmentsByPV: attachmentPV})}
			for i := range n {
				if err := idx.indexer.Add(makeAttachment(fmt.Sprintf("va-%d", i), fmt.Sprintf("pv-%d", i), "n1")); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if vas, err := idx.ForPV("pv-7"); err != nil || len(vas) != 1 {
					b.Fatalf("ForPV = %v, %v", vas, err)
				}
			}
		})
	}
}
