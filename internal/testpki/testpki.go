// Package testpki makes a throwaway certificate authority for tests: server certificates for the
// simulated gateways and payrouter's listeners, client certificates for mutual TLS, all written
// as PEM files the way an operator would hand them to payrouter's configuration.
package testpki

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
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertFile is the CA certificate in PEM, for ca_file / client_ca_file.
	CertFile string
	dir      string
}

// Pair is an issued certificate and its key, in PEM files.
type Pair struct {
	CertFile, KeyFile string
}

// TLS loads the pair for a tls.Config.
func (p Pair) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	if err != nil {
		t.Fatalf("testpki: load %s: %v", p.CertFile, err)
	}
	return c
}

// NewCA makes a CA whose files live in t.TempDir().
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	dir := t.TempDir()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testpki: make CA: %v", err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{cert: cert, key: key, dir: dir, CertFile: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Pool is a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Server issues a server certificate for hosts (DNS names or IP addresses); file names start
// with name, so issuing the same name again replaces the files (a rotation).
func (ca *CA) Server(t testing.TB, name string, hosts ...string) Pair {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageServerAuth, hosts)
}

// Client issues a client certificate with common name cn.
func (ca *CA) Client(t testing.TB, cn string) Pair {
	t.Helper()
	return ca.issue(t, cn, x509.ExtKeyUsageClientAuth, nil)
}

func (ca *CA) issue(t testing.TB, name string, usage x509.ExtKeyUsage, hosts []string) Pair {
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testpki: issue %s: %v", name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testpki: key of %s: %v", name, err)
	}
	p := Pair{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem")}
	// Write the key first, then the certificate, each through a rename: a reader rotating
	// certificates never sees a half-written file.
	writePEM(t, p.KeyFile, "PRIVATE KEY", kder)
	writePEM(t, p.CertFile, "CERTIFICATE", der)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testpki: key: %v", err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("testpki: serial: %v", err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testpki: write %s: %v", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("testpki: write %s: %v", path, err)
	}
}
