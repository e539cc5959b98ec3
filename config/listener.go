package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/payrouter/payrouter"
)

// Defaults of the listeners' connection settings.
const (
	// defaultMaxConnections bounds the storefront listener's open connections. A shop's load
	// balancers keep a pool of keep-alive connections each, rarely more than a few hundred in
	// all; 4096 leaves them ample room while an idle connection's cost (a goroutine and two
	// 4 KiB buffers, some 20 KiB) stays under 100 MiB at the cap, and it fits the usual
	// file descriptor limit of 65536 beside the gateway and database connections.
	defaultMaxConnections = 4096
	// defaultAdminMaxConnections bounds the admin listener: a few operators, their status pages
	// and a Prometheus or two need tens at most.
	defaultAdminMaxConnections = 64
	// addressShareDivisor makes the default of max_connections_per_address a quarter of
	// max_connections (rounded up): one address (a load balancer node, a shop's NAT) may still
	// hold far more connections than it needs (1024 of the default 4096), while a client
	// holding its share, every connection busy with a slow request, leaves three quarters to
	// everyone else. It takes four addresses, not one, to hold everything.
	addressShareDivisor = 4
	// defaultIdleTimeout closes keep-alive connections idle this long. It is longer than the 60s
	// idle timeout of the common load balancers, so that the balancer, not payrouter, closes an
	// idle connection: a balancer that sends a request on a connection payrouter closes at that
	// moment sees a failed request.
	defaultIdleTimeout = 75 * time.Second
)

// TLS versions a listener may require as its minimum.
const (
	TLSVersion12 = "1.2" // the default
	TLSVersion13 = "1.3"
)

// maxPEMFile bounds what is read of a certificate, key or CA file: a real one is a few KiB, and
// a path naming a device or a huge file must not hang or exhaust `check`.
const maxPEMFile = 1 << 20

// ListenerTLS makes a listener serve HTTPS (tls for listen, admin_tls for admin_listen). The
// files are read when the configuration loads, so `payrouter check` and a reload find a missing,
// unreadable or mismatched file, and read again on every reload (SIGHUP or POST /admin/reload):
// that is how a rotated certificate is taken up without a restart.
type ListenerTLS struct {
	// CertFile is the server certificate in PEM, followed by any intermediates. Required.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the certificate's private key in PEM (PKCS #1, PKCS #8 or SEC 1). Required.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile, when set, holds the CA certificates (PEM) that sign client certificates: the
	// listener then requires every client to present a certificate signed by one of them
	// (mutual TLS). Empty: no client certificate is asked for.
	ClientCAFile string `yaml:"client_ca_file"`
	// MinVersion is the oldest TLS version accepted: "1.2" (default) or "1.3".
	MinVersion string `yaml:"min_version"`

	// loaded is what the files held when the configuration was loaded.
	loaded *tls.Config
}

// ServerConfig returns the TLS settings read from the files when the configuration was loaded:
// the certificate, the minimum version and, with client_ca_file, the required client
// certificates. Each call returns a new copy, for the caller to change.
func (t *ListenerTLS) ServerConfig() *tls.Config {
	if t == nil || t.loaded == nil {
		return nil
	}
	return t.loaded.Clone()
}

// RequiresClientCert reports whether the listener asks every client for a certificate.
func (t *ListenerTLS) RequiresClientCert() bool { return t != nil && t.ClientCAFile != "" }

// listeners checks both listeners' connection settings and reads their TLS files.
func (v *validator) listeners() {
	c := v.c
	for _, l := range []struct {
		prefix   string
		tls      *ListenerTLS
		maxConns int
		perAddr  int
		idle     time.Duration
	}{
		{"", c.TLS, c.MaxConnections, c.MaxConnectionsPerAddress, c.IdleTimeout},
		{"admin_", c.AdminTLS, c.AdminMaxConnections, c.AdminMaxConnectionsPerAddress, c.AdminIdleTimeout},
	} {
		if l.maxConns < 1 {
			v.addf(l.prefix+"max_connections", "must be >= 1")
		}
		switch {
		case l.perAddr < 0:
			v.addf(l.prefix+"max_connections_per_address", "must be >= 0 (0: no limit per client address but %smax_connections)", l.prefix)
		case l.maxConns >= 1 && l.perAddr > l.maxConns:
			v.addf(l.prefix+"max_connections_per_address", "%d is more than %smax_connections (%d): at most %d, or 0 for no limit per client address", l.perAddr, l.prefix, l.maxConns, l.maxConns)
		}
		v.positive(l.prefix+"idle_timeout", l.idle)
		if l.tls != nil {
			v.listenerTLS(l.prefix+"tls", l.tls)
		}
	}
}

// defaultPerAddress is max_connections_per_address when the file leaves it out: a quarter of
// the listener's max_connections, rounded up, at least 1.
func defaultPerAddress(maxConns int) int {
	return max(1, (maxConns+addressShareDivisor-1)/addressShareDivisor)
}

// listenerTLS validates one tls section and, when its files are good, keeps what they hold.
func (v *validator) listenerTLS(p string, t *ListenerTLS) {
	t.loaded = nil
	var minVersion uint16
	switch strings.TrimSpace(t.MinVersion) {
	case TLSVersion12:
		minVersion = tls.VersionTLS12
	case TLSVersion13:
		minVersion = tls.VersionTLS13
	case "1.0", "1.1", "1":
		v.addf(p+".min_version", "TLS %s is refused: it has known weaknesses; use %q or %q", t.MinVersion, TLSVersion12, TLSVersion13)
	default:
		v.addf(p+".min_version", "must be %q or %q, got %q", TLSVersion12, TLSVersion13, t.MinVersion)
	}
	certPEM := v.pemFile(p+".cert_file", t.CertFile, true)
	keyPEM := v.pemFile(p+".key_file", t.KeyFile, true)
	var cert tls.Certificate
	certOK := false
	if certPEM != nil && keyPEM != nil {
		var err error
		cert, err = tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			v.addf(p, "cert_file %s and key_file %s: %s", t.CertFile, t.KeyFile, keyPairProblem(err))
		} else {
			certOK = true
		}
	}
	var clientCAs *x509.CertPool
	caOK := true
	if t.ClientCAFile != "" {
		caOK = false
		if caPEM := v.pemFile(p+".client_ca_file", t.ClientCAFile, false); caPEM != nil {
			clientCAs = x509.NewCertPool()
			if !clientCAs.AppendCertsFromPEM(caPEM) {
				v.addf(p+".client_ca_file", "%s holds no PEM certificate (want the CA certificates that sign client certificates)", t.ClientCAFile)
			} else {
				caOK = true
			}
		}
	}
	if !certOK || !caOK || minVersion == 0 {
		return
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   minVersion,
		CipherSuites: slices.Clone(payrouter.TLS12CipherSuites), // AEAD only under TLS 1.2
		// HTTP/1.1 only: the listeners' framing guard and connection cap reason in HTTP/1.1
		// connections (docs/tls.md).
		NextProtos: []string{"http/1.1"},
	}
	if clientCAs != nil {
		cfg.ClientCAs = clientCAs
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	t.loaded = cfg
}

// pemFile reads a PEM file named at path p, reporting what is wrong with it; nil when it cannot.
func (v *validator) pemFile(p, name string, required bool) []byte {
	if strings.TrimSpace(name) == "" {
		if required {
			v.addf(p, "required (a PEM file)")
		}
		return nil
	}
	data, err := readPEMFile(name)
	if err != nil {
		v.addf(p, "%v", err)
		return nil
	}
	return data
}

// readPEMFile reads a regular file of at most maxPEMFile bytes.
func readPEMFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", name, unwrapPath(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", name, unwrapPath(err))
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPEMFile+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", name, unwrapPath(err))
	}
	if len(data) > maxPEMFile {
		return nil, fmt.Errorf("%s is larger than %d bytes; not a PEM certificate or key", name, maxPEMFile)
	}
	return data, nil
}

// unwrapPath drops the path an *os.PathError repeats: the message names the file already.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// keyPairProblem says why tls.X509KeyPair refused a pair, without quoting any key material.
func keyPairProblem(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "does not match"):
		return "the private key does not match the certificate"
	case strings.Contains(msg, "failed to find any PEM data in certificate"),
		strings.Contains(msg, "failed to find certificate PEM data"):
		return "cert_file holds no PEM certificate"
	case strings.Contains(msg, "found a certificate rather than a key"):
		return "key_file holds a certificate, not its private key"
	case strings.Contains(msg, "failed to find any PEM data in key"),
		strings.Contains(msg, "failed to find PEM block with type ending in"):
		return "key_file holds no PEM private key"
	}
	return strings.TrimPrefix(msg, "tls: ")
}

// tlsWarnings warns about listener certificates that expire soon or have expired: `check` run
// by a deploy (or a reload's log) says so before clients start failing their handshakes.
func (c *Config) tlsWarnings(now time.Time, warn func(format string, args ...any)) {
	for _, l := range []struct {
		path string
		tls  *ListenerTLS
	}{{"tls", c.TLS}, {"admin_tls", c.AdminTLS}} {
		cfg := l.tls.ServerConfig()
		if cfg == nil || len(cfg.Certificates) == 0 || cfg.Certificates[0].Leaf == nil {
			continue
		}
		leaf := cfg.Certificates[0].Leaf
		switch left := leaf.NotAfter.Sub(now); {
		case left <= 0:
			warn("%s.cert_file: %s expired on %s; clients refuse it", l.path, l.tls.CertFile, leaf.NotAfter.UTC().Format(time.DateOnly))
		case left < 14*24*time.Hour:
			warn("%s.cert_file: %s expires on %s, in less than 14 days; rotate it (docs/tls.md)", l.path, l.tls.CertFile, leaf.NotAfter.UTC().Format(time.DateOnly))
		}
		if now.Before(leaf.NotBefore) {
			warn("%s.cert_file: %s is not valid before %s; clients refuse it until then", l.path, l.tls.CertFile, leaf.NotBefore.UTC().Format(time.RFC3339))
		}
	}
}

// plainHTTPBeyondHost reports whether a listener address may be reached from other hosts: every
// interface (":8080", "0.0.0.0:8080", "[::]:8080") or any address but loopback and "localhost".
func plainHTTPBeyondHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false // validation says so
	}
	if strings.EqualFold(host, "localhost") {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}
