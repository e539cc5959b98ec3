package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/payrouter/payrouter/internal/testpki"
)

// TestGatewayPlainHTTP: a plain http:// gateway off loopback is refused with one line naming it,
// unless it says insecure: true (and then check warns); loopback in all its spellings is
// accepted as it is.
func TestGatewayPlainHTTP(t *testing.T) {
	for _, host := range []string{"127.0.0.1:9101", "127.8.9.10:80", "[::1]:9101", "localhost:9101", "LOCALHOST"} {
		if _, err := Parse([]byte(edit(t, baseYAML, "http://127.0.0.1:9101", "http://"+host)), nil, testKinds); err != nil {
			t.Errorf("http://%s: %v", host, err)
		}
	}
	for _, host := range []string{"10.0.0.5:9101", "paywell.internal", "[2001:db8::1]:80", "127.0.0.1.nip.io", "0.0.0.0:9101"} {
		got := problemsOf(t, edit(t, baseYAML, "http://127.0.0.1:9101", "http://"+host))
		if len(got) != 1 || !strings.HasPrefix(got[0], "gateways.paywell.base_url: plain http:// to ") ||
			!strings.Contains(got[0], "gateways.paywell.insecure: true") {
			t.Errorf("http://%s: problems %q, want one line naming gateways.paywell.base_url and insecure", host, got)
		}
	}
	text := edit(t, baseYAML, "base_url: http://127.0.0.1:9101", "base_url: http://10.0.0.5:9101\n    insecure: true")
	c := mustParse(t, text)
	if w := c.Check().Warnings; len(w) != 1 || !strings.HasPrefix(w[0], "gateways.paywell.insecure: plain http:// to 10.0.0.5 is allowed") {
		t.Errorf("warnings %q, want the insecure one", w)
	}
	if s := c.Summary()[0]; !s.Insecure || s.TLS != nil {
		t.Errorf("summary %+v, want insecure and no tls", s)
	}
	useless := mustParse(t, edit(t, baseYAML, "base_url: http://127.0.0.1:9101", "base_url: https://pay.example\n    insecure: true"))
	if w := useless.Check().Warnings; len(w) != 1 || !strings.Contains(w[0], "has no effect") {
		t.Errorf("warnings %q, want insecure to have no effect", w)
	}
}

// TestGatewayTLS: the tls section is read and checked at load: good files load, each bad one is
// one line naming the field and the path, never the contents; TLS settings on plain http:// are
// refused; the summary shows paths and settings.
func TestGatewayTLS(t *testing.T) {
	ca := testpki.NewCA(t, "gateways")
	pair := ca.Client(t, "payrouter")
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("SECRET-LOOKING-CONTENTS"), 0o600); err != nil {
		t.Fatal(err)
	}
	withTLS := func(tls string) string {
		return edit(t, baseYAML, "base_url: http://127.0.0.1:9101", "base_url: https://pay.example\n    tls: "+tls)
	}

	c := mustParse(t, withTLS(`{ca_file: "`+ca.CertFile+`", cert_file: "`+pair.CertFile+`", key_file: "`+pair.KeyFile+`", server_name: api.pay.example, min_version: "1.3"}`))
	s := c.Summary()[0]
	want := TLSSummary{CAFile: ca.CertFile, CertFile: pair.CertFile, KeyFile: pair.KeyFile, ServerName: "api.pay.example", MinVersion: "1.3"}
	if s.TLS == nil || *s.TLS != want {
		t.Errorf("summary TLS %+v, want %+v", s.TLS, want)
	}
	if d := mustParse(t, withTLS("{}")); d.Gateways["paywell"].TLS.MinVersion != "1.2" || d.Summary()[0].TLS.MinVersion != "1.2" {
		t.Errorf("min_version default %q, want 1.2", d.Gateways["paywell"].TLS.MinVersion)
	}

	missing := filepath.Join(dir, "missing.pem")
	cases := []struct {
		name, tls string
		want      []string
	}{
		{"a missing CA file", `{ca_file: "` + missing + `"}`, []string{"gateways.paywell.tls.ca_file: " + missing + ": no such file"}},
		{"a CA file that is not PEM", `{ca_file: "` + junk + `"}`, []string{"gateways.paywell.tls.ca_file: " + junk + ": holds no PEM certificate"}},
		{"a certificate without a key", `{cert_file: "` + pair.CertFile + `"}`, []string{"gateways.paywell.tls.key_file: required with cert_file"}},
		{"a key that is not PEM", `{cert_file: "` + pair.CertFile + `", key_file: "` + junk + `"}`, []string{"gateways.paywell.tls.key_file: " + junk + ": holds no PEM private key"}},
		{"TLS 1.0", `{min_version: "1.0"}`, []string{`gateways.paywell.tls.min_version: must be "1.2" or "1.3"`}},
	}
	for _, tc := range cases {
		got := problemsOf(t, withTLS(tc.tls))
		if len(got) != len(tc.want) {
			t.Errorf("%s: problems %q, want %q", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], tc.want[i]) {
				t.Errorf("%s: problem %q, want it to start with %q", tc.name, got[i], tc.want[i])
			}
			if strings.Contains(got[i], "SECRET-LOOKING") {
				t.Errorf("%s: the problem quotes the file: %q", tc.name, got[i])
			}
		}
	}

	got := problemsOf(t, edit(t, baseYAML, "base_url: http://127.0.0.1:9101", `base_url: http://127.0.0.1:9101
    tls: {ca_file: "`+ca.CertFile+`"}`))
	if !slices.Equal(got, []string{"gateways.paywell.tls: applies to an https:// base_url only; base_url is plain http://"}) {
		t.Errorf("tls on http://: problems %q", got)
	}
	if s := mustParse(t, baseYAML).Summary()[0]; s.TLS != nil {
		t.Errorf("a plain http:// gateway shows TLS settings: %+v", s.TLS)
	}
}
