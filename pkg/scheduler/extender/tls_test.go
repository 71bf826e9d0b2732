package extender

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	tls  tls.Certificate
}

func issue(t *testing.T, cn string, parent *keyPair, isCA bool, usage x509.ExtKeyUsage) *keyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: isCA, BasicConstraintsValid: true, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &keyPair{cert: cert, key: key, tls: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}
}

// The extender's TLS configuration admits only clients with a certificate
// from the configured CA.
func TestClientCertTLSConfig(t *testing.T) {
	ca := issue(t, "extender-ca", nil, true, x509.ExtKeyUsageAny)
	server := issue(t, "extender", ca, false, x509.ExtKeyUsageServerAuth)
	client := issue(t, "kube-scheduler", ca, false, x509.ExtKeyUsageClientAuth)
	stranger := issue(t, "stranger", nil, true, x509.ExtKeyUsageClientAuth)

	cfg, err := ClientCertTLSConfig(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certificates = []tls.Certificate{server.tls}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	get := func(cert *keyPair) error {
		tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if cert != nil {
			tc.Certificates = []tls.Certificate{cert.tls}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := c.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(client); err != nil {
		t.Errorf("client with a CA-signed certificate: %v", err)
	}
	if err := get(nil); err == nil {
		t.Error("client without a certificate admitted")
	}
	if err := get(stranger); err == nil {
		t.Error("client with a foreign certificate admitted")
	}
	if _, err := ClientCertTLSConfig([]byte("not pem")); err == nil {
		t.Error("bad CA data accepted")
	}
}
