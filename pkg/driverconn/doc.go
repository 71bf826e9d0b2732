// Package driverconn connects the provisioner to its CSI driver and watches
// that connection. SocketPath checks the CSI address (a local unix socket
// only), WaitForSocket waits for the driver to create and serve it (and
// says why it cannot connect yet), Connect also dials it and
// reads the driver's name and capabilities (DriverInfo), and a
// Monitor notices when the connection drops, reconnects, and ends the
// process's run when the driver comes back changed (ErrDriverChanged).
package driverconn
