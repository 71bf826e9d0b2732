// Package sanity runs csi-sanity (csi-test v5) against the mock driver
// served in-process.
package sanity
