// Package faults injects errors and latency into the mock driver's CSI
// calls: per method, on every Nth call or with a probability, optionally
// only for calls that concern one topology segment, optionally a limited
// number of times. Rules are plain JSON-friendly values so that they can be
// set at start (a file) and replaced at run time (the admin endpoint).
package faults
