package main

import (
	"sort"
	"time"
)

// Contenders: our csi-provisioner, ours with --bind-through
// (--bind-through-contender), and the binary of --compare.
const (
	ours     = "ours"
	oursBind = "ours+bind"
	theirs   = "theirs"
)

// Result is the outcome of one run: one scenario, one contender, one rep.
// Times are in seconds, CPU in milliseconds of the provisioner process
// (user + system, from /proc/<pid>/stat).
type Result struct {
	Scenario  string `json:"scenario"`
	Contender string `json:"contender"`
	Binary    string `json:"binary"`
	Nodes     int    `json:"nodes"`
	Volumes   int    `json:"volumes"`
	Rep       int    `json:"rep"`
	// LoadAverage is the machine's 1, 5 and 15 minute load before the run.
	LoadAverage [3]float64 `json:"loadAverage"`
	// PerSecond is PVs created (delete: PVs removed; wffc: pods scheduled)
	// per second, from the first to the last.
	PerSecond float64 `json:"perSecond"`
	// ToFirst is start -> first PV (delete: first PV gone; wffc: first pod
	// scheduled). Start: the provisioner's launch for backlog, the first
	// claim's creation for burst and wffc, the first delete for delete.
	ToFirst float64 `json:"startToFirst"`
	// ToAll is start -> all claims Bound (delete: all PVs gone).
	ToAll float64 `json:"startToAll"`
	// ToAllPVs is start -> all PVs created, as the benchmark's watch saw
	// the last: what the provisioner alone needs, before any binding.
	ToAllPVs float64 `json:"startToAllPVs,omitempty"`
	// MachineToAllPVs and MachineToAllBound are the machine's CPU from the
	// launch to all PVs created and to all claims Bound (backlog).
	MachineToAllPVs   *MachineWindow `json:"machineToAllPVs,omitempty"`
	MachineToAllBound *MachineWindow `json:"machineToAllBound,omitempty"`
	// ToAllScheduled is start -> all pods scheduled (wffc).
	ToAllScheduled float64 `json:"startToAllScheduled,omitempty"`
	// P50 and P99 are per claim, create -> Bound (backlog: from the later of
	// its creation and the launch; delete: delete -> PV gone; wffc: pod
	// create -> scheduled).
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	// Startup is launch -> informers synced ("Started provisioner
	// controller" in the log), CPUStartup the CPU it took (backlog and
	// burst).
	Startup    float64 `json:"startup,omitempty"`
	CPUStartup float64 `json:"cpuStartupMs,omitempty"`
	// CPUSteadyPerVolume is the CPU from the first to the last PV divided by
	// their number; CPUPerVolume all the CPU of the run (start-up included
	// for backlog) divided by the volumes.
	CPUSteadyPerVolume float64 `json:"cpuSteadyMsPerVolume"`
	CPUPerVolume       float64 `json:"cpuMsPerVolume"`
	// PeakRSS is VmHWM at the end of the run, in MB.
	PeakRSS float64 `json:"peakRssMB,omitempty"`
	// PeakRSSDeleted is VmHWM once the run's claims were deleted and their
	// volumes gone (node scenario): the peak over provisioning and deleting.
	PeakRSSDeleted float64 `json:"peakRssDeletedMB,omitempty"`
	// RSSSynced is VmRSS when the informers had synced, in MB.
	RSSSynced float64 `json:"rssSyncedMB,omitempty"`
	// RSSAnon and RSSFile split the resident memory at the end of the run:
	// anonymous (Go heap, stacks) and file-backed (the binary's pages).
	RSSAnon float64 `json:"rssAnonMB,omitempty"`
	RSSFile float64 `json:"rssFileMB,omitempty"`
	// Requests counts the provisioner's API requests of the run by "verb
	// resource" (audit log); RequestsPerVolume is their sum per volume.
	Requests          map[string]int `json:"requests"`
	RequestsPerVolume float64        `json:"requestsPerVolume"`
	// PVControllerBindPerVolume are kube-controller-manager's PV
	// controller's successful writes per volume that bind (binder.go): PV
	// and claim status writes, and claim and PV writes once the claim's PV
	// was created. PVControllerMarkPerVolume are its claim writes before
	// that: the volume.kubernetes.io/storage-provisioner mark for the
	// provisioner. PVControllerWrites counts them by "verb
	// resource[/subresource]", marks with " (mark)", refused writes with
	// " (<code>)". Until the run settled; not for the nodes scenario.
	PVControllerBindPerVolume float64        `json:"pvControllerBindWritesPerVolume"`
	PVControllerMarkPerVolume float64        `json:"pvControllerMarkWritesPerVolume"`
	PVControllerWrites        map[string]int `json:"pvControllerWrites,omitempty"`
	// EventsDuring are Event writes until all claims were Bound (delete: all
	// PVs gone), EventsAfter those after, until they stopped.
	EventsDuring int `json:"eventsDuring"`
	EventsAfter  int `json:"eventsAfter"`
	// Scheduler ("stock" or "plugin") and its CPU per pod, wffc only.
	Scheduler          string  `json:"scheduler,omitempty"`
	SchedulerCPUPerPod float64 `json:"schedulerCpuMsPerPod,omitempty"`
	// What the scheduler did per pod by its own /metrics (schedwork.go):
	// KB its heap allocated, GC cycles per 100 pods, and nodes filtered.
	SchedulerAllocKBPerPod  float64 `json:"schedulerAllocKBPerPod,omitempty"`
	SchedulerGCPer100Pods   float64 `json:"schedulerGcPer100Pods,omitempty"`
	SchedulerFilteredPerPod float64 `json:"schedulerFilteredPerPod,omitempty"`
	// BackgroundClaims (node) are the claims of other nodes in the
	// cluster, each bound to a PV; BackgroundSetup is how long creating
	// them and their PVs took until all were Bound, in seconds (0 when an
	// earlier rep created them).
	BackgroundClaims int     `json:"backgroundClaims,omitempty"`
	BackgroundSetup  float64 `json:"backgroundSetupS,omitempty"`
	// OtherNodeChanges (node) are the background claims and PVs changed
	// once the run's claims were Bound, OtherNodeEvents the watch events
	// of claims and PVs the instance received for them (nodechurn.go).
	OtherNodeChanges int     `json:"otherNodeChanges,omitempty"`
	OtherNodeEvents  float64 `json:"otherNodeEvents"`
	// Instances (nodes) is the number of provisioner processes of the
	// nodes scenario's node deployment, Deployment what ran: "node ×N"
	// and the instances' extra flags, or "central ×1" for the reference.
	// In a nodes run, PeakRSS, RSSSynced and RSSAnon are sums over its
	// provisioners and CPUPerVolume their CPU (and the router's) per
	// volume, from the first claim's creation to all Bound; Startup is
	// launch -> every provisioner synced.
	Instances  int    `json:"instances,omitempty"`
	Deployment string `json:"deployment,omitempty"`
	// InstancePeakRSSMax is the largest VmHWM of one provisioner (MB),
	// RouterPeakRSS csi-node-router's when it ran.
	InstancePeakRSSMax float64 `json:"instancePeakRssMaxMB,omitempty"`
	RouterPeakRSS      float64 `json:"routerPeakRssMB,omitempty"`
	// APIServerCPUPerVolume and EtcdCPUPerVolume are kube-apiserver's and
	// etcd's CPU (ms, /proc/<pid>/stat) from the first claim's creation to
	// all Bound, per volume; APIServerCPUStartup kube-apiserver's CPU from
	// the launch until every provisioner had synced (nodes).
	APIServerCPUPerVolume float64 `json:"apiserverCpuMsPerVolume,omitempty"`
	EtcdCPUPerVolume      float64 `json:"etcdCpuMsPerVolume,omitempty"`
	APIServerCPUStartup   float64 `json:"apiserverCpuStartupMs,omitempty"`
	// WatchEventsPerVolume are the claim and PV watch events the API
	// server sent to all its watchers (apiserver_watch_events_total), per
	// volume, over the same span; WatchDispatchedPerVolume the events its
	// watch cache dispatched (each once, whatever the watchers).
	WatchEventsPerVolume     float64 `json:"watchEventsPerVolume,omitempty"`
	WatchDispatchedPerVolume float64 `json:"watchDispatchedPerVolume,omitempty"`
	// Failures lists the checks that failed; empty when all passed.
	Failures []string `json:"failures"`
}

// latencies returns the p50 and p99 of end[k] - max(start[k], floor) over
// the keys of end, in seconds.
func latencies(start, end map[string]time.Time, floor time.Time) (p50, p99 float64) {
	var d []float64
	for k, e := range end {
		s, ok := start[k]
		if !ok {
			continue
		}
		if s.Before(floor) {
			s = floor
		}
		d = append(d, e.Sub(s).Seconds())
	}
	return percentile(d, 50), percentile(d, 99)
}

// percentile returns the p-th percentile (nearest rank) of values.
func percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return 0
	}
	v := append([]float64(nil), values...)
	sort.Float64s(v)
	rank := int(p/100*float64(len(v))+0.999999) - 1
	if rank < 0 {
		rank = 0
	}
	if rank >= len(v) {
		rank = len(v) - 1
	}
	return v[rank]
}

// rate returns count-1 intervals per second between first and last (count
// per second when they coincide).
func rate(count int, first, last time.Time) float64 {
	if count < 2 || !last.After(first) {
		return 0
	}
	return float64(count-1) / last.Sub(first).Seconds()
}

// sum adds the values of m.
func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
