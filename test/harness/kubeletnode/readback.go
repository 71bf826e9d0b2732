package kubeletnode

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-topology-provisioner/csi-topology-provisioner/tools/image/imagebuild"
)

// ReadBackContainer is the name of the init container AddReadBack adds.
const ReadBackContainer = "read-back"

// readBackPrefix starts what rwcheck says it read.
const readBackPrefix = "read back: "

// AddReadBack gives a pod template an init container of the lab's rwcheck
// image that, as the image's non-root user, writes "written by <pod> <pod
// UID>" to the file check on the volume named volume, unless an earlier pod
// wrote it (-keep), and reads it back: ReadBack returns what it read. The
// pod gets fsGroup 65532, so that kubelet hands it volumes whose CSIDriver
// says fsGroupPolicy File.
func (ns *Nodes) AddReadBack(spec *v1.PodSpec, volume string) {
	if spec.SecurityContext == nil {
		spec.SecurityContext = &v1.PodSecurityContext{}
	}
	spec.SecurityContext.FSGroup = ptr.To[int64](imagebuild.NonRootUID)
	spec.InitContainers = append(spec.InitContainers, ns.ReadBackContainer(ReadBackContainer, volume))
}

// ReadBackContainer is the container AddReadBack adds, named name; extra
// are more rwcheck flags (e.g. -stay).
func (ns *Nodes) ReadBackContainer(name, volume string, extra ...string) v1.Container {
	return v1.Container{
		Name: name, Image: ns.Images.Ref(RWCheck), ImagePullPolicy: v1.PullNever,
		Args: append([]string{"-keep", "-file=/data/check", "-text=written by $(POD_NAME) $(POD_UID)"}, extra...),
		Env: []v1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_UID", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
		},
		VolumeMounts: []v1.VolumeMount{{Name: volume, MountPath: "/data"}},
	}
}

// ReadBack returns what the pod's read-back init container read from its
// volume once it has run (done), or the error it reported.
func ReadBack(p *v1.Pod) (read string, done bool, err error) {
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name != ReadBackContainer || s.State.Terminated == nil {
			continue
		}
		msg := s.State.Terminated.Message
		if s.State.Terminated.ExitCode != 0 || !strings.HasPrefix(msg, readBackPrefix) {
			return "", true, fmt.Errorf("pod %s could not write and read its volume: %s", p.Name, msg)
		}
		return strings.TrimPrefix(msg, readBackPrefix), true, nil
	}
	return "", false, nil
}

// WrittenBy is what AddReadBack's container writes for the pod.
func WrittenBy(p *v1.Pod) string { return fmt.Sprintf("written by %s %s", p.Name, p.UID) }
