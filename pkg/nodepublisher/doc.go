// Package nodepublisher is the library of csi-node-publisher: it publishes a
// node's CSINode entry for a driver, the driver's topology labels on the Node
// and the node ID annotation (Publisher), as kubelet's plugin registration
// does. Counting a node's volumes against the published limit is package
// limits'; the driver's heartbeat Lease is package heartbeat's.
package nodepublisher
