// Package httpendpoint serves a binary's HTTP endpoint (health, metrics,
// profiling) with the settings every binary of the project shares.
package httpendpoint

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// Serve serves handler on lis in the background, with a 10 s limit on
// reading request headers, until the returned server is closed; a failure
// other than that close is logged.
func Serve(ctx context.Context, lis net.Listener, handler http.Handler) *http.Server {
	logger := klog.FromContext(ctx)
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		logger.Info("Serving health and metrics", "address", lis.Addr().String())
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP endpoint failed", "address", lis.Addr().String())
		}
	}()
	return srv
}
