package config

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter/internal/testpki"
)

// withTLS appends a top-level section to the base configuration.
func withTLS(section string) string { return baseYAML + section }

func tlsSection(key string, p testpki.Pair, extra string) string {
	return fmt.Sprintf("%s:\n  cert_file: %q\n  key_file: %q\n%s", key, p.CertFile, p.KeyFile, extra)
}

// TestListenerTLSLoads: good files give the TLS settings serve hands its listeners; a client CA
// makes the client certificate required.
func TestListenerTLSLoads(t *testing.T) {
	ca := testpki.NewCA(t, "listeners")
	srv := ca.Server(t, "srv", "127.0.0.1")
	c := mustParse(t, withTLS(tlsSection("tls", srv, "")+
		tlsSection("admin_tls", srv, fmt.Sprintf("  client_ca_file: %q\n  min_version: \"1.3\"\n", ca.CertFile))))

	st := c.TLS.ServerConfig()
	if st == nil || len(st.Certificates) != 1 || st.MinVersion != tls.VersionTLS12 || st.ClientAuth != tls.NoClientCert {
		t.Fatalf("tls: %+v, want one certificate, TLS 1.2 minimum, no client certificate", st)
	}
	if c.TLS.MinVersion != "1.2" || c.TLS.RequiresClientCert() {
		t.Errorf("tls.min_version %q (want the default 1.2), requires a client certificate %v", c.TLS.MinVersion, c.TLS.RequiresClientCert())
	}
	adm := c.AdminTLS.ServerConfig()
	if adm == nil || adm.MinVersion != tls.VersionTLS13 || adm.ClientAuth != tls.RequireAndVerifyClientCert || adm.ClientCAs == nil {
		t.Fatalf("admin_tls: %+v, want TLS 1.3 and a required client certificate", adm)
	}
	if !slices.Equal(st.NextProtos, []string{"http/1.1"}) {
		t.Errorf("NextProtos %v, want http/1.1 only", st.NextProtos)
	}
	// A copy each time: a caller changing it must not change the configuration.
	st.MinVersion = tls.VersionTLS10
	if c.TLS.ServerConfig().MinVersion != tls.VersionTLS12 {
		t.Error("ServerConfig returned the configuration's own tls.Config")
	}
	if c.MaxConnections != 4096 || c.AdminMaxConnections != 64 || c.IdleTimeout != 75*time.Second || c.AdminIdleTimeout != 75*time.Second {
		t.Errorf("connection defaults: %d %v / admin %d %v", c.MaxConnections, c.IdleTimeout, c.AdminMaxConnections, c.AdminIdleTimeout)
	}
	if c.MaxConnectionsPerAddress != 1024 || c.AdminMaxConnectionsPerAddress != 16 {
		t.Errorf("per-address defaults: %d / admin %d; want a quarter of max_connections, 1024 / 16", c.MaxConnectionsPerAddress, c.AdminMaxConnectionsPerAddress)
	}
}

// TestListenerTLSProblems: every bad file or value is one line naming the field and the file.
func TestListenerTLSProblems(t *testing.T) {
	ca := testpki.NewCA(t, "problems")
	srv := ca.Server(t, "srv", "127.0.0.1")
	other := ca.Server(t, "other", "127.0.0.1")
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		section string
		want    []string
	}{
		{"missing cert file", fmt.Sprintf("tls: {cert_file: %q, key_file: %q}\n", missing, srv.KeyFile),
			[]string{"tls.cert_file: cannot read " + missing + ": no such file or directory"}},
		{"no cert or key", "admin_tls: {client_ca_file: " + ca.CertFile + "}\n",
			[]string{"admin_tls.cert_file: required (a PEM file)", "admin_tls.key_file: required (a PEM file)"}},
		{"key of another certificate", fmt.Sprintf("tls: {cert_file: %q, key_file: %q}\n", srv.CertFile, other.KeyFile),
			[]string{fmt.Sprintf("tls: cert_file %s and key_file %s: the private key does not match the certificate", srv.CertFile, other.KeyFile)}},
		{"key given as the certificate", fmt.Sprintf("tls: {cert_file: %q, key_file: %q}\n", srv.KeyFile, srv.KeyFile),
			[]string{fmt.Sprintf("tls: cert_file %s and key_file %s: cert_file holds no PEM certificate", srv.KeyFile, srv.KeyFile)}},
		{"certificate given as the key", fmt.Sprintf("tls: {cert_file: %q, key_file: %q}\n", srv.CertFile, srv.CertFile),
			[]string{fmt.Sprintf("tls: cert_file %s and key_file %s: key_file holds a certificate, not its private key", srv.CertFile, srv.CertFile)}},
		{"a directory", fmt.Sprintf("tls: {cert_file: %q, key_file: %q}\n", dir, srv.KeyFile),
			[]string{"tls.cert_file: " + dir + " is not a regular file"}},
		{"client CA without a certificate", tlsSection("tls", srv, fmt.Sprintf("  client_ca_file: %q\n", empty)),
			[]string{"tls.client_ca_file: " + empty + " holds no PEM certificate (want the CA certificates that sign client certificates)"}},
		{"client CA missing", tlsSection("admin_tls", srv, fmt.Sprintf("  client_ca_file: %q\n", missing)),
			[]string{"admin_tls.client_ca_file: cannot read " + missing + ": no such file or directory"}},
		{"TLS 1.1", tlsSection("tls", srv, "  min_version: \"1.1\"\n"),
			[]string{`tls.min_version: TLS 1.1 is refused: it has known weaknesses; use "1.2" or "1.3"`}},
		{"TLS 1.0", tlsSection("admin_tls", srv, "  min_version: \"1.0\"\n"),
			[]string{`admin_tls.min_version: TLS 1.0 is refused: it has known weaknesses; use "1.2" or "1.3"`}},
		{"unknown version", tlsSection("tls", srv, "  min_version: \"TLS1.3\"\n"),
			[]string{`tls.min_version: must be "1.2" or "1.3", got "TLS1.3"`}},
		{"no connections", "max_connections: 0\nadmin_max_connections: -1\n",
			[]string{"max_connections: must be >= 1", "admin_max_connections: must be >= 1"}},
		{"negative share per address", "max_connections_per_address: -1\n",
			[]string{"max_connections_per_address: must be >= 0 (0: no limit per client address but max_connections)"}},
		{"share per address above the cap", "admin_max_connections: 10\nadmin_max_connections_per_address: 11\nmax_connections_per_address: 4097\n",
			[]string{"max_connections_per_address: 4097 is more than max_connections (4096): at most 4096, or 0 for no limit per client address",
				"admin_max_connections_per_address: 11 is more than admin_max_connections (10): at most 10, or 0 for no limit per client address"}},
		{"no idle timeout", "idle_timeout: 0s\nadmin_idle_timeout: -1s\n",
			[]string{"idle_timeout: must be > 0", "admin_idle_timeout: must be > 0"}},
		{"misspelt key", tlsSection("tls", srv, "  min_verison: \"1.3\"\n"),
			[]string{`tls: unknown key "min_verison" (did you mean "min_version"?)`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := problemsOf(t, withTLS(tc.section))
			for i, line := range got { // the line numbers depend on the base configuration
				if rest, ok := strings.CutPrefix(line, "line "); ok {
					_, got[i], _ = strings.Cut(rest, ": ")
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestListenerTLSNeverOpensDevices: a path naming a device is refused without reading it (a
// read of /dev/zero would never end).
func TestListenerTLSNeverOpensDevices(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero here")
	}
	got := problemsOf(t, withTLS("tls: {cert_file: /dev/zero, key_file: /dev/zero}\n"))
	want := []string{"tls.cert_file: /dev/zero is not a regular file", "tls.key_file: /dev/zero is not a regular file"}
	if !slices.Equal(got, want) {
		t.Errorf("problems %q, want %q", got, want)
	}
}

// TestListenerWarnings: plain HTTP on an address other hosts reach, and certificates near or past
// their end, are warnings of `check`.
func TestListenerWarnings(t *testing.T) {
	for _, tc := range []struct {
		listen string
		warns  bool
	}{
		{":8080", true}, {"0.0.0.0:8080", true}, {"[::]:8080", true}, {"10.0.0.5:8080", true}, {"shop.internal:8080", true},
		{"127.0.0.1:8080", false}, {"[::1]:8080", false}, {"localhost:8080", false},
	} {
		c := mustParse(t, fmt.Sprintf("listen: %q\n", tc.listen)+baseYAML)
		warned := slices.ContainsFunc(c.Check().Warnings, func(w string) bool { return strings.HasPrefix(w, "listen: ") })
		if warned != tc.warns {
			t.Errorf("listen %q: warned %v, want %v (%q)", tc.listen, warned, tc.warns, c.Check().Warnings)
		}
	}
	c := mustParse(t, "admin_listen: \":9090\"\n"+baseYAML)
	if w := c.Check().Warnings; len(w) != 1 || !strings.HasPrefix(w[0], "admin_listen: :9090 is reachable from other hosts and admin_tls is not set") {
		t.Errorf("admin_listen on every interface: warnings %q", w)
	}

	ca := testpki.NewCA(t, "expiry")
	srv := ca.Server(t, "srv", "127.0.0.1") // valid for 24 hours from an hour ago
	c = mustParse(t, "listen: \":8443\"\n"+withTLS(tlsSection("tls", srv, "")))
	var got []string
	warn := func(format string, args ...any) { got = append(got, fmt.Sprintf(format, args...)) }
	c.tlsWarnings(time.Now(), warn)
	if len(got) != 1 || !strings.HasPrefix(got[0], "tls.cert_file: "+srv.CertFile+" expires on ") {
		t.Errorf("a certificate with a day left: %q", got)
	}
	got = nil
	c.tlsWarnings(time.Now().Add(48*time.Hour), warn)
	if len(got) != 1 || !strings.Contains(got[0], " expired on ") {
		t.Errorf("an expired certificate: %q", got)
	}
	got = nil
	c.tlsWarnings(time.Now().Add(-2*time.Hour), warn)
	if len(got) != 2 || !strings.Contains(got[1], " is not valid before ") {
		t.Errorf("a certificate not valid yet: %q", got)
	}
}

// TestListenerReload: a reload takes new TLS files; turning TLS on or off, and the connection
// limits, wait for a restart.
func TestListenerReload(t *testing.T) {
	ca := testpki.NewCA(t, "reload")
	a, b := ca.Server(t, "a", "127.0.0.1"), ca.Server(t, "b", "127.0.0.1")
	running := mustParse(t, withTLS(tlsSection("tls", a, "")))

	next := mustParse(t, withTLS(tlsSection("tls", b, "")+"max_connections: 10\nadmin_idle_timeout: 5s\n"))
	ch := Diff(running, next)
	// max_connections_per_address, left out, follows max_connections: a quarter of it.
	if !slices.Equal(ch.RestartNeeded, []string{"max_connections", "max_connections_per_address", "admin_idle_timeout"}) {
		t.Errorf("restart needed %v", ch.RestartNeeded)
	}
	applied := Reloadable(running, next)
	if applied.TLS.CertFile != b.CertFile || applied.MaxConnections != 4096 || applied.MaxConnectionsPerAddress != 1024 || applied.AdminIdleTimeout != 75*time.Second {
		t.Errorf("applied tls %s, max_connections %d, max_connections_per_address %d, admin_idle_timeout %v",
			applied.TLS.CertFile, applied.MaxConnections, applied.MaxConnectionsPerAddress, applied.AdminIdleTimeout)
	}
	next = mustParse(t, withTLS(tlsSection("tls", a, "")+"admin_max_connections_per_address: 0\n"))
	if ch := Diff(running, next); !slices.Equal(ch.RestartNeeded, []string{"admin_max_connections_per_address"}) {
		t.Errorf("admin_max_connections_per_address changed: restart needed %v", ch.RestartNeeded)
	}
	if applied := Reloadable(running, next); applied.AdminMaxConnectionsPerAddress != 16 {
		t.Errorf("a reload applied admin_max_connections_per_address %d; the listener keeps 16 until a restart", applied.AdminMaxConnectionsPerAddress)
	}

	plain := mustParse(t, withTLS(tlsSection("admin_tls", b, "")))
	ch = Diff(running, plain)
	if !slices.Equal(ch.RestartNeeded, []string{"tls", "admin_tls"}) {
		t.Errorf("tls turned off and admin_tls on: restart needed %v", ch.RestartNeeded)
	}
	applied = Reloadable(running, plain)
	if applied.TLS != running.TLS || applied.AdminTLS != nil {
		t.Errorf("Reloadable turned TLS on or off: tls %v admin_tls %v", applied.TLS, applied.AdminTLS)
	}
}

// TestListenerTLS12IsAEADOnly: under TLS 1.2 a listener accepts ECDHE with an AEAD cipher only;
// a client offering nothing but CBC suites with SHA-1 is refused in the handshake.
func TestListenerTLS12IsAEADOnly(t *testing.T) {
	ca := testpki.NewCA(t, "listeners")
	srv := ca.Server(t, "srv", "127.0.0.1")
	st := mustParse(t, withTLS(tlsSection("tls", srv, ""))).TLS.ServerConfig()
	handshake := func(suites []uint16) error {
		server, client := net.Pipe()
		defer server.Close()
		defer client.Close()
		done := make(chan error, 1)
		go func() { done <- tls.Server(server, st).Handshake() }()
		c := tls.Client(client, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12, CipherSuites: suites})
		err := c.Handshake()
		c.Close()
		server.Close()
		<-done
		return err
	}
	cbc := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA}
	if err := handshake(cbc); err == nil {
		t.Error("a TLS 1.2 client offering only CBC-SHA1 suites was accepted")
	}
	if err := handshake([]uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}); err != nil {
		t.Errorf("a TLS 1.2 client offering ECDHE-ECDSA-AES128-GCM: %v, want it accepted", err)
	}
}

// TestCheckWarnsOfSecretsOthersMayRead: check warns when the configuration file holds secrets
// written in it and others may read it, and when a private key file is readable by others; a
// file whose secrets all come from the environment, or that only its owner reads, says nothing.
func TestCheckWarnsOfSecretsOthersMayRead(t *testing.T) {
	ca := testpki.NewCA(t, "listeners")
	srv := ca.Server(t, "srv", "127.0.0.1")
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return path
	}
	warningsOf := func(path string, env map[string]string) string {
		c, err := Load(path, func(k string) string { return env[k] }, testKinds)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(c.Check().Warnings, "\n")
	}
	literal := write("literal.yaml", withTLS(tlsSection("tls", srv, "")), 0o644)
	if err := os.Chmod(srv.KeyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if w := warningsOf(literal, nil); !strings.Contains(w, literal+": readable by every user") || !strings.Contains(w, "auth.") {
		t.Errorf("a 0644 file with secrets written in it: warnings\n%s\nwant one naming the file and the secrets' fields", w)
	}
	if err := os.Chmod(literal, 0o600); err != nil {
		t.Fatal(err)
	}
	if w := warningsOf(literal, nil); strings.Contains(w, "readable by every user") {
		t.Errorf("a 0600 file: warnings\n%s\nwant none of readers", w)
	}
	if err := os.Chmod(srv.KeyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if w := warningsOf(literal, nil); !strings.Contains(w, "tls.key_file: the private key "+srv.KeyFile+" is readable by every user") {
		t.Errorf("a 0644 private key: warnings\n%s\nwant one naming tls.key_file", w)
	}
	if err := os.Chmod(srv.KeyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	fromEnv := baseYAML
	for from, to := range map[string]string{"sk_test_key_0123456789abcdef": `"${API_KEY}"`, "adm_test_token_0123456789abc": `"${ADMIN_TOKEN}"`, "pw_secret_1": `"${PAYWELL_KEY}"`, "dg_secret_2": `"${DING_KEY}"`} {
		if !strings.Contains(fromEnv, from) {
			t.Fatalf("the base configuration no longer has %s: update this test", from)
		}
		fromEnv = strings.ReplaceAll(fromEnv, from, to)
	}
	open := write("env.yaml", fromEnv, 0o644)
	env := map[string]string{"API_KEY": "sk_test_key_0123456789abcdef", "ADMIN_TOKEN": "adm_test_token_0123456789abc", "PAYWELL_KEY": "pw_secret_1", "DING_KEY": "dg_secret_2"}
	if w := warningsOf(open, env); strings.Contains(w, "readable by every user") {
		t.Errorf("a 0644 file whose secrets come from the environment: warnings\n%s\nwant none of readers", w)
	}
}

// TestConnectionsPerAddressDefault: left out, max_connections_per_address is a quarter of the
// listener's max_connections, rounded up; 0 given is kept: no limit per address.
func TestConnectionsPerAddressDefault(t *testing.T) {
	for _, tc := range []struct {
		extra          string
		perAddr, admin int
	}{
		{"", 1024, 16},
		{"max_connections: 40\nadmin_max_connections: 3\n", 10, 1},
		{"max_connections: 1\nadmin_max_connections: 1\n", 1, 1},
		{"max_connections: 40\nmax_connections_per_address: 0\nadmin_max_connections_per_address: 64\n", 0, 64},
		{"max_connections_per_address: ${PAYROUTER_UNSET_PER_ADDRESS:-}\n", 1024, 16},
	} {
		c := mustParse(t, withTLS(tc.extra))
		if c.MaxConnectionsPerAddress != tc.perAddr || c.AdminMaxConnectionsPerAddress != tc.admin {
			t.Errorf("%q: max_connections_per_address %d, admin %d; want %d, %d", tc.extra, c.MaxConnectionsPerAddress, c.AdminMaxConnectionsPerAddress, tc.perAddr, tc.admin)
		}
	}
}
