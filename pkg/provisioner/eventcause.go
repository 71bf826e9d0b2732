package provisioner

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v10/controller"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/pkg/contract"
)

// handBackError is the error of an attempt that hands the claim back to
// the scheduler: the cause, and the reason in words.
type handBackError struct {
	reason RescheduleReason
	err    error
}

func (e *handBackError) Error() string {
	return fmt.Sprintf("%v; asking the scheduler to pick another node (%s)", e.err, e.reason)
}

func (e *handBackError) Unwrap() error { return e.err }

// createVolumeError is the driver's error to the CreateVolume of a volume.
type createVolumeError struct {
	name string
	err  error
}

func (e *createVolumeError) Error() string { return fmt.Sprintf("CreateVolume %q: %v", e.name, e.err) }

func (e *createVolumeError) Unwrap() error { return e.err }

// secretError is the error reading a Secret the class names.
type secretError struct {
	namespace, name string
	err             error
}

func (e *secretError) Error() string {
	return fmt.Sprintf("secret %s/%s: %v", e.namespace, e.name, e.err)
}

func (e *secretError) Unwrap() error { return e.err }

// failureAnnotations are the contract annotations of the ProvisioningFailed
// Event of an attempt that ended in state with err: why, as typed values,
// for readers such as explain (nil when err says nothing they key on).
func failureAnnotations(state controller.ProvisioningState, err error) map[string]string {
	ann := map[string]string{}
	var hb *handBackError
	if state == controller.ProvisioningReschedule && errors.As(err, &hb) {
		ann[contract.AnnHandBack] = string(hb.reason)
	}
	var se *secretError
	switch {
	case errors.Is(err, ErrSecretTemplate):
		ann[contract.AnnRefusal] = string(contract.RefusalInvalidSecretTemplate)
	case errors.Is(err, ErrInvalidParameter):
		ann[contract.AnnRefusal] = string(contract.RefusalInvalidParameter)
	case errors.As(err, &se) && apierrors.IsNotFound(se.err):
		ann[contract.AnnRefusal] = string(contract.RefusalSecretNotFound)
		ann[contract.AnnSecret] = se.namespace + "/" + se.name
	}
	var cve *createVolumeError
	if errors.As(err, &cve) {
		ann[contract.AnnDriverCode] = status.Code(cve.err).String()
	}
	if len(ann) == 0 {
		return nil
	}
	return ann
}

// failureTTL is how long a failure's annotations wait for its Event: the
// library posts it as soon as Provision returns, so one not taken by then
// was dropped (the Event correlator's spam filter, a full queue).
const failureTTL = 10 * time.Minute

// maxFailuresPerClaim bounds the failures of one claim that wait for their
// Events.
const maxFailuresPerClaim = 4

// failureNote is a failed attempt's error text and the annotations of its
// ProvisioningFailed Event.
type failureNote struct {
	text        string
	annotations map[string]string
	at          time.Time
}

// RecordFailure stores the annotations of the ProvisioningFailed Event that
// the library posts for a claim's failed attempt, whose message ends with
// err's text. Nothing is stored when annotations is empty.
func (l *DecisionLog) RecordFailure(uid types.UID, err error, annotations map[string]string) {
	if len(annotations) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	notes := append(l.failures[uid], failureNote{text: err.Error(), annotations: annotations, at: now})
	if len(notes) > maxFailuresPerClaim {
		notes = notes[len(notes)-maxFailuresPerClaim:]
	}
	l.failures[uid] = notes
	if len(l.failures) > l.sweepAt {
		l.sweep(now)
	}
}

// sweep forgets the failures whose Events never came (failureTTL).
func (l *DecisionLog) sweep(now time.Time) {
	for uid, notes := range l.failures {
		if now.Sub(notes[len(notes)-1].at) > failureTTL {
			delete(l.failures, uid)
		}
	}
	l.sweepAt = max(minSweep, 2*len(l.failures))
}

// minSweep is the number of claims with failures below which none are
// swept.
const minSweep = 1024

// takeFailure returns and forgets the annotations of the claim's failure
// whose Event has message (the library's words, then the error's text),
// with those of older failures, whose Events are past. nil when none.
func (l *DecisionLog) takeFailure(uid types.UID, message string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	notes := l.failures[uid]
	for i := len(notes) - 1; i >= 0; i-- {
		if strings.HasSuffix(message, notes[i].text) {
			if rest := notes[i+1:]; len(rest) > 0 {
				l.failures[uid] = rest
			} else {
				delete(l.failures, uid)
			}
			return notes[i].annotations
		}
	}
	return nil
}

// annotate sets the contract annotations of a provisioning Event of the
// library: the placement on ProvisioningSucceeded, why on
// ProvisioningFailed.
func annotate(ev *v1.Event, annotations map[string]string) {
	if len(annotations) == 0 {
		return
	}
	if ev.Annotations == nil {
		ev.Annotations = make(map[string]string, len(annotations))
	}
	for k, v := range annotations {
		ev.Annotations[k] = v
	}
}
