// Package state holds the mock driver's volumes and persists them to a file,
// so that a restarted driver knows its volumes.
package state
