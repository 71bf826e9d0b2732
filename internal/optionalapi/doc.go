// Package optionalapi starts the informers of APIs a process can work
// without: the VolumeSnapshot CRDs (an add-on that is often installed after
// the CSI driver and the scheduler), VolumeAttributesClasses, the driver
// heartbeat Leases, and any resource that RBAC may deny. Such an API is
// probed (one LIST of at most one object, as the informer would list it)
// until it is served and readable; only then are its informers started, so
// no cache sync ever waits on an API the process may not read, and no
// reflector retries in a loop with an error logged each time.
//
// Each API says what it is missing in one log line, when it is first found
// missing or forbidden, and in one more when it appears: the process picks
// it up without a restart. A consumer that needs the API now (a claim that
// restores a snapshot, say) calls Poke to have it probed at once rather
// than at the next interval.
package optionalapi
