package gatewayhttp

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/payrouter/payrouter"
)

// NewClient is the one constructor of the *http.Client that payrouter talks to a gateway with
// (the customer calls through each gateway's bulkhead, and the out-of-band prober). It never
// follows a redirect: Go's client would send a 307 or 308 again, body and headers included
// (the gateway's X-Api-Key, the card token), to whatever host Location names, stripping only
// Authorization, and would turn a 302 or 303 into a GET. A 3xx is handed back to the adapter as
// the gateway's answer instead, and every adapter maps it to unknown: the charge is looked up at
// that gateway, never sent anywhere else. It sets no Timeout: every call carries its deadline in
// its context (the Guard's), as one client-wide timeout would fire the same for every operation.
func NewClient(rt http.RoundTripper) *http.Client {
	return &http.Client{Transport: rt, CheckRedirect: refuseRedirects}
}

// refuseRedirects is the CheckRedirect of every gateway client: the 3xx is the answer.
func refuseRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// neverRedirects returns client, or a copy of it that does not follow redirects whatever
// CheckRedirect it was given: an adapter built on a client from elsewhere (a test's, a tool's)
// must not re-send a charge and its credentials where a Location header says either.
func neverRedirects(client *http.Client) *http.Client {
	c := *client
	c.CheckRedirect = refuseRedirects
	return &c
}

// TLS versions a gateway connection may be held to (ClientTLS.MinVersion).
const (
	TLS12 = "1.2" // the default, and the lowest allowed: PCI DSS forbids anything older
	TLS13 = "1.3"
)

// ClientTLS is how payrouter reaches one gateway over TLS: configuration's
// gateways.<name>.tls. The zero value is the system's CA pool, no client certificate, the host
// of the base URL as the server name, TLS 1.2 at least.
type ClientTLS struct {
	// CAFile is a PEM file of the CA certificates that may sign the gateway's certificate. It
	// replaces the system pool for this gateway only (a private CA, a pinned issuer); empty: the
	// system pool.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its private key, presented to a
	// gateway that requires mutual TLS. Both or neither.
	CertFile, KeyFile string
	// ServerName is the name the gateway's certificate must hold, and is sent as SNI; empty: the
	// host of the base URL.
	ServerName string
	// MinVersion is "1.2" (empty means it) or "1.3".
	MinVersion string
}

// TLSProblem is one thing wrong with a ClientTLS: the field (as configuration names it, such as
// "ca_file"), the file's path when there is one, and why. It never quotes a file's contents.
type TLSProblem struct {
	Field, Path, Reason string
}

// Error names the field, the path and the reason.
func (p TLSProblem) Error() string {
	if p.Path == "" {
		return p.Field + ": " + p.Reason
	}
	return fmt.Sprintf("%s: %s: %s", p.Field, p.Path, p.Reason)
}

// TLSError is every problem of a ClientTLS, found at once.
type TLSError struct {
	Problems []TLSProblem
}

// Error returns the problems, one per line.
func (e *TLSError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// DefaultTLSConfig is the TLS configuration of a gateway without a tls section: the system pool,
// TLS 1.2 at least.
func DefaultTLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: slices.Clone(payrouter.TLS12CipherSuites)}
}

// Load reads and checks c's files and returns the *tls.Config of the gateway's connections, and
// a fingerprint of everything it was built from (the files' contents included), so a reload can
// tell a rotated certificate from an unchanged one without comparing keys. Every problem is in a
// *TLSError. It is the one place where a gateway's TLS configuration is built: configuration
// validation calls it to report what is wrong, and the customer and probe transports are built
// from what it returns.
func (c ClientTLS) Load() (*tls.Config, string, error) {
	cfg := DefaultTLSConfig()
	var problems []TLSProblem
	bad := func(field, path, format string, args ...any) {
		problems = append(problems, TLSProblem{Field: field, Path: path, Reason: fmt.Sprintf(format, args...)})
	}
	fp := sha256.New()
	part := func(label string, b []byte) {
		fmt.Fprintf(fp, "%s %d\n", label, len(b))
		fp.Write(b)
	}

	switch c.MinVersion {
	case "", TLS12:
		cfg.MinVersion = tls.VersionTLS12
	case TLS13:
		cfg.MinVersion = tls.VersionTLS13
	default:
		bad("min_version", "", "must be %q or %q (older versions are not allowed), got %q", TLS12, TLS13, c.MinVersion)
	}
	part("min_version", []byte(c.MinVersion))

	if s := c.ServerName; s != "" {
		if strings.ContainsAny(s, "/:@ \t") || strings.Trim(s, ".") == "" {
			bad("server_name", "", "must be a host name or IP address (no scheme, port or path), got %q", s)
		}
		cfg.ServerName = s
	}
	part("server_name", []byte(c.ServerName))

	if c.CAFile != "" {
		if pem, err := readPEM(c.CAFile); err != nil {
			bad("ca_file", c.CAFile, "%s", err)
		} else if pool, err := certPool(pem); err != nil {
			bad("ca_file", c.CAFile, "%s", err)
		} else {
			cfg.RootCAs = pool
			part("ca_file", pem)
		}
	}

	switch {
	case c.CertFile != "" && c.KeyFile == "":
		bad("key_file", "", "required with cert_file (the client certificate's private key)")
	case c.CertFile == "" && c.KeyFile != "":
		bad("cert_file", "", "required with key_file (the client certificate)")
	case c.CertFile != "":
		certPEM, certErr := readPEM(c.CertFile)
		if certErr != nil {
			bad("cert_file", c.CertFile, "%s", certErr)
		}
		keyPEM, keyErr := readPEM(c.KeyFile)
		if keyErr != nil {
			bad("key_file", c.KeyFile, "%s", keyErr)
		}
		if certErr == nil && keyErr == nil {
			if cert, field, path, err := keyPair(c, certPEM, keyPEM); err != nil {
				bad(field, path, "%s", err)
			} else {
				cfg.Certificates = []tls.Certificate{cert}
				part("cert_file", certPEM)
				part("key_file", keyPEM)
			}
		}
	}
	if len(problems) > 0 {
		return nil, "", &TLSError{Problems: problems}
	}
	return cfg, hex.EncodeToString(fp.Sum(nil)), nil
}

// maxPEMFile bounds what is read of a certificate or key file: a few KiB in practice, and a path
// pointing at something else (a log, a device) must not be read whole.
const maxPEMFile = 1 << 20

// readPEM reads a PEM file; its errors say why without quoting the contents.
func readPEM(path string) ([]byte, error) {
	// Stat first: opening a named pipe would block until something writes to it.
	if st, err := os.Stat(path); err != nil {
		return nil, errors.New(fileReason(err))
	} else if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.New(fileReason(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, errors.New(fileReason(err))
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if st.Size() > maxPEMFile {
		return nil, fmt.Errorf("larger than %d bytes: not a certificate or key file", maxPEMFile)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return nil, errors.New(fileReason(err))
	}
	return b, nil
}

// fileReason says why a file could not be read, without repeating its path (the problem names it).
func fileReason(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "no such file"
	case errors.Is(err, os.ErrPermission):
		return "cannot be read: permission denied"
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return "cannot be read: " + pe.Err.Error()
	}
	return "cannot be read: " + err.Error()
}

// certPool parses every CERTIFICATE block of a PEM file; a file holding none, or a block that is
// not a certificate, is refused rather than silently trusting fewer CAs than the file lists.
func certPool(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a %q PEM block; only CERTIFICATE blocks belong in a CA file", block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d is not valid: %v", n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, errors.New("holds no PEM certificate")
	}
	return pool, nil
}

// keyPair loads the client certificate and says which field is at fault when it fails.
func keyPair(c ClientTLS, certPEM, keyPEM []byte) (tls.Certificate, string, string, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return tls.Certificate{}, "cert_file", c.CertFile, errors.New("holds no PEM certificate (is it the key?)")
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return tls.Certificate{}, "cert_file", c.CertFile, fmt.Errorf("not a valid certificate: %v", err)
	}
	if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		// A gateway refuses it at every handshake: better said now than as a run of unavailable.
		return tls.Certificate{}, "cert_file", c.CertFile, fmt.Errorf("not valid now: valid from %s to %s",
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if b, _ := pem.Decode(keyPEM); b == nil || !strings.HasSuffix(b.Type, "PRIVATE KEY") {
		return tls.Certificate{}, "key_file", c.KeyFile, errors.New("holds no PEM private key (is it the certificate?)")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// crypto/tls's messages name the problem ("private key does not match public key"),
		// never the key.
		return tls.Certificate{}, "key_file", c.KeyFile, fmt.Errorf("does not go with cert_file %s: %s", c.CertFile, strings.TrimPrefix(err.Error(), "tls: "))
	}
	return cert, "", "", nil
}
