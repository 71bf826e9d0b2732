package extender

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
)

// ClientCertTLSConfig returns a server TLS configuration that requires and
// verifies client certificates signed by the CAs in caPEM.
func ClientCertTLSConfig(caPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no PEM certificate in the client CA data")
	}
	return &tls.Config{ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}
