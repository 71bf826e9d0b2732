package conformance

// allowlist lists every known difference between csi-provisioner and
// upstream's external-provisioner v6.3.0 that test/conformance measures,
// with the reason a vendor would accept it (docs/migrating.md renders it).
var allowlist = []allowed{}
