package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHealthcheck: `payrouter healthcheck` exits 0 when the endpoint answers 200 and 1, saying
// what it met, when it answers anything else, redirects, hangs or is not there; a URL it cannot
// use is exit 2.
func TestHealthcheck(t *testing.T) {
	hang := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"status":"ok"}`) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(503)
		fmt.Fprint(w, `{"status":"unavailable"}`)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/healthz", http.StatusFound) })
	mux.HandleFunc("/hang", func(http.ResponseWriter, *http.Request) { <-hang })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) }) // first: srv.Close waits for the handler it lets go
	gone := httptest.NewServer(mux)
	gone.Close()

	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"200", []string{"-url", srv.URL + "/healthz"}, 0, srv.URL + `/healthz answered 200 {"status":"ok"}`},
		{"503", []string{"-url", srv.URL + "/readyz"}, 1, `answered 503 {"status":"unavailable"}`},
		{"a redirect is not followed", []string{"-url", srv.URL + "/moved"}, 1, "answered 302"},
		{"no answer in time", []string{"-url", srv.URL + "/hang", "-timeout", "200ms"}, 1, "did not answer within 200ms"},
		{"nothing listening", []string{"-url", gone.URL + "/healthz"}, 1, "connection refused"},
		{"not a URL", []string{"-url", "127.0.0.1:8080/healthz"}, 2, "want an http:// or https:// URL"},
		{"another scheme", []string{"-url", "ftp://127.0.0.1/healthz"}, 2, "want an http:// or https:// URL"},
		{"no timeout", []string{"-url", srv.URL + "/healthz", "-timeout", "0s"}, 2, "want more than 0"},
		{"a stray argument", []string{"-url", srv.URL + "/healthz", "now"}, 2, `unexpected argument "now"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(t.Context(), append([]string{"healthcheck"}, tc.args...), nil, &out, &errOut)
			if code := exitCode(err); code != tc.code {
				t.Fatalf("exit %d (%v), want %d", code, err, tc.code)
			}
			if msg := out.String() + fmt.Sprint(err) + errOut.String(); !strings.Contains(msg, tc.want) {
				t.Errorf("said %q, want it to say %q", msg, tc.want)
			}
		})
	}
}
