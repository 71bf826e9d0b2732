package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// RunProvisionerOnce runs csi-provisioner (of BinDir) with the lab's flags
// (Config.ProvisionerArgs included) plus extra, under the provisioner's
// ServiceAccount, as a one-shot command (e.g. --remove-in-flight-records),
// and waits for it to exit. It returns the process's output and its exit
// error (nil for exit status 0). It stops the process when ctx ends.
func (l *Lab) RunProvisionerOnce(ctx context.Context, extra ...string) (string, error) {
	l.provCount++
	p, err := l.startProvisioner("csi-provisioner-once-"+strconv.Itoa(l.provCount), filepath.Join(l.BinDir, "csi-provisioner"), extra...)
	if err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		p.Kill()
		err = fmt.Errorf("stopped: %w", ctx.Err())
	}
	out, rerr := os.ReadFile(p.LogPath())
	if rerr != nil {
		return "", rerr
	}
	return string(out), err
}
