package provisioner

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/tools/cache"
)

// indexAttachmentsByPV is the name of the VolumeAttachment informer's index
// by spec.source.persistentVolumeName.
const indexAttachmentsByPV = "persistentVolumeName"

// ErrVolumeAttached is wrapped by the error Delete returns while a
// VolumeAttachment of the PV exists.
var ErrVolumeAttached = errors.New("volume is still attached")

// AttachmentIndex answers which VolumeAttachments name a PV, from a
// VolumeAttachment informer indexed by PV name: a lookup costs the same with
// ten or ten thousand attachments, and no API call. Safe for concurrent use.
//
// Why: a volume deleted while a node still has it attached (the
// attach/detach controller has not detached it yet, or a detach failed)
// can leave a node with a dangling device, and most drivers refuse or
// misbehave. Upstream external-provisioner v6.3.0 refuses DeleteVolume
// while a VolumeAttachment names the PV, when the driver has the
// PUBLISH_UNPUBLISH_VOLUME controller capability (only then do
// VolumeAttachments of its volumes mean anything).
type AttachmentIndex struct {
	indexer cache.Indexer
}

// NewAttachmentIndex adds the by-PV index to a VolumeAttachment informer
// (before it starts) and returns the index over it.
func NewAttachmentIndex(informer cache.SharedIndexInformer) (*AttachmentIndex, error) {
	if err := informer.AddIndexers(cache.Indexers{indexAttachmentsByPV: attachmentPV}); err != nil {
		return nil, fmt.Errorf("indexing VolumeAttachments by PV: %w", err)
	}
	return &AttachmentIndex{indexer: informer.GetIndexer()}, nil
}

// attachmentPV is the index function: the PV a VolumeAttachment attaches,
// none for inline volumes.
func attachmentPV(obj any) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.Source.PersistentVolumeName == nil {
		return nil, nil
	}
	return []string{*va.Spec.Source.PersistentVolumeName}, nil
}

// ForPV returns the names and nodes of the VolumeAttachments of PV pv,
// sorted by name.
func (a *AttachmentIndex) ForPV(pv string) ([]string, error) {
	objs, err := a.indexer.ByIndex(indexAttachmentsByPV, pv)
	if err != nil {
		return nil, fmt.Errorf("looking up VolumeAttachments of PV %q: %w", pv, err)
	}
	var out []string
	for _, obj := range objs {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok {
			out = append(out, fmt.Sprintf("%s (node %s)", va.Name, va.Spec.NodeName))
		}
	}
	slices.Sort(out)
	return out, nil
}

// attachedError says which VolumeAttachments keep a PV's volume from being
// deleted. The library posts it as the PV's VolumeFailedDelete Event and
// retries the PV with backoff.
type attachedError struct {
	pv          string
	attachments []string
}

func (e *attachedError) Error() string {
	return fmt.Sprintf("not deleting the volume of PV %q: it is still attached, VolumeAttachment %s exists; "+
		"it is deleted once the volume is detached", e.pv, strings.Join(e.attachments, ", "))
}

func (e *attachedError) Unwrap() error { return ErrVolumeAttached }

// checkDetached returns an attachedError while a VolumeAttachment names the
// PV; nil without an AttachmentIndex (the driver does not attach).
func (p *Provisioner) checkDetached(pv string) error {
	if p.deps.Attachments == nil {
		return nil
	}
	vas, err := p.deps.Attachments.ForPV(pv)
	if err != nil {
		return err
	}
	if len(vas) > 0 {
		return &attachedError{pv: pv, attachments: vas}
	}
	return nil
}

// attachmentGoneHandler calls gone with the PV name of every deleted
// VolumeAttachment of a PV, so that a PV waiting for its detach is deleted
// at once rather than at the end of its backoff.
func attachmentGoneHandler(gone func(pv string)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pvs, _ := attachmentPV(obj); len(pvs) == 1 {
				gone(pvs[0])
			}
		},
	}
}
