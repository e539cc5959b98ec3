package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gatewayConfig writes a configuration of one Paywell gateway at baseURL, with extra keys of the
// gateway (indented as they are).
func gatewayConfig(t *testing.T, baseURL, extra string) string {
	t.Helper()
	text := fmt.Sprintf("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nauth: {api_keys: [test-key]}\ngateways:\n  paywell:\n    kind: paywell\n    base_url: %q\n    credentials: {api_key: secret-paywell}\n%s",
		baseURL, extra)
	path := filepath.Join(t.TempDir(), "payrouter.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPlainHTTPGatewayOffLoopback: check and serve refuse a plain http:// gateway whose host is
// not loopback with one line naming it, and accept it with insecure: true (check warns).
func TestPlainHTTPGatewayOffLoopback(t *testing.T) {
	path := gatewayConfig(t, "http://10.0.0.5:9101", "")
	for _, cmd := range []string{"check", "serve"} {
		var out, errOut bytes.Buffer
		err := run(t.Context(), []string{cmd, "-config", path}, os.Getenv, &out, &errOut)
		if code := exitCode(err); code != 2 {
			t.Fatalf("%s: exit code %d (%v), want 2", cmd, code, err)
		}
		msg := strings.TrimSpace(fmt.Sprint(err))
		if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "gateways.paywell.base_url: plain http:// to 10.0.0.5, which is not loopback") {
			t.Errorf("%s: error %q, want one line naming gateways.paywell.base_url", cmd, msg)
		}
	}
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"check", "-config", gatewayConfig(t, "http://10.0.0.5:9101", "    insecure: true\n")}, os.Getenv, &out, &errOut); err != nil {
		t.Fatalf("check with insecure: true: %v", err)
	}
	if !strings.Contains(out.String(), "gateways.paywell.insecure: plain http:// to 10.0.0.5 is allowed") {
		t.Errorf("check with insecure: true does not warn:\n%s", out.String())
	}
}

// TestCheckNamesBadTLSFiles: an unreadable or invalid TLS file is a line naming the field and the
// path, never the file's contents.
func TestCheckNamesBadTLSFiles(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "client-key.pem")
	if err := os.WriteFile(notPEM, []byte("hunter2-not-a-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "ca.pem")
	path := gatewayConfig(t, "https://api.paywell.example",
		fmt.Sprintf("    tls: {ca_file: %q, cert_file: %q, key_file: %q}\n", missing, notPEM, notPEM))
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"check", "-config", path}, os.Getenv, &out, &errOut)
	if code := exitCode(err); code != 2 {
		t.Fatalf("exit code %d (%v), want 2", code, err)
	}
	msg := fmt.Sprint(err)
	for _, want := range []string{
		"gateways.paywell.tls.ca_file: " + missing + ": no such file",
		"gateways.paywell.tls.cert_file: " + notPEM + ": holds no PEM certificate",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "hunter2") {
		t.Errorf("the error quotes a file: %q", msg)
	}
}
