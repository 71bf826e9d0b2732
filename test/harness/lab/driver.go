package lab

// KillController kills the mock driver's controller with SIGKILL, a crash:
// its connections drop and its socket file stays behind, and volumes not yet
// in its state file are lost with it. It returns once the process is gone.
func (l *Lab) KillController() { l.controller.Kill() }

// RestartController starts the mock driver's controller again after
// KillController: same socket (the driver replaces the stale file), same
// state file, same segments and admin address. It returns once the admin
// endpoint answers; while the controller runs it does nothing (a test's
// cleanup can call it to make sure the next test has a driver).
func (l *Lab) RestartController() error {
	if !l.controller.Exited() {
		return nil
	}
	return l.launchController()
}

// KillProvisioner kills the running csi-provisioner with SIGKILL and
// returns once it is gone; StartProvisioner starts a new one, as a
// supervisor would.
func (l *Lab) KillProvisioner() {
	if l.provisioner != nil {
		l.provisioner.Kill()
	}
}
