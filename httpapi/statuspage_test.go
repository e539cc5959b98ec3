package httpapi

import (
	"crypto/sha256"
	"encoding/base64"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestStatusPageIsPublicAndTheAPIIsNot: a browser's navigation to /admin/ cannot send a Bearer
// header, so the page and its script are served to anyone, with or without an admin token
// configured, and locked down by their headers; everything else under /admin/ still needs the
// token, including paths that merely look like the public ones.
func TestStatusPageIsPublicAndTheAPIIsNot(t *testing.T) {
	for _, tc := range []struct {
		name       string
		adminToken string
		guarded    int // what /admin/breakers answers without the token
	}{
		{"admin token configured", "admin-token", 401},
		{"admin API disabled", "", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStack(t, tc.adminToken)
			for _, page := range []struct {
				path, contentType, body string
			}{
				{"/admin/", "text/html; charset=utf-8", string(statusPageHTML)},
				{"/admin/statuspage.js", "text/javascript; charset=utf-8", string(statusPageJS)},
			} {
				for _, auth := range []string{"", "Bearer wrong", "Bearer admin-token"} {
					r := do(st.admin, "GET", page.path, "", "Authorization", auth)
					if r.status != 200 || r.body != page.body {
						t.Errorf("GET %s with Authorization %q: got %d (%d bytes), want 200 and the embedded file", page.path, auth, r.status, len(r.body))
					}
					want := map[string]string{
						"Content-Type":            page.contentType,
						"Cache-Control":           "no-store",
						"Content-Security-Policy": statusPageCSP,
						"X-Frame-Options":         "DENY",
						"X-Content-Type-Options":  "nosniff",
						"Referrer-Policy":         "no-referrer",
					}
					for name, value := range want {
						if got := r.header.Get(name); got != value {
							t.Errorf("GET %s: %s %q, want %q", page.path, name, got, value)
						}
					}
				}
			}
			for _, path := range []string{
				"/admin/breakers", "/admin/gateways", "/admin/charges?status=processing", "/admin",
				"/admin/index.html", "/admin/statuspage.js/x", "/admin/statuspage.html", "/admin//breakers",
			} {
				if r := do(st.admin, "GET", path, ""); r.status != tc.guarded {
					t.Errorf("GET %s without a token: got %d %s, want %d", path, r.status, r.body, tc.guarded)
				}
			}
			if r := do(st.admin, "POST", "/admin/", ""); r.status == 200 {
				t.Errorf("POST /admin/: got 200, want the page served to GET only")
			}
			if r := do(st.api, "GET", "/admin/", ""); r.status != 404 {
				t.Errorf("GET /admin/ on the storefront listener: got %d, want 404 (the page is the admin listener's)", r.status)
			}
		})
	}
	st := newStack(t, "admin-token")
	if r := do(st.admin, "GET", "/admin/breakers", "", "Authorization", "Bearer admin-token"); r.status != 200 {
		t.Errorf("GET /admin/breakers with the token: got %d %s, want 200", r.status, r.body)
	}
}

// TestStatusPageLoadsNothingButItsScript: the page must work with its own Content-Security-Policy
// (no inline script, no inline style but the hashed <style>, nothing from elsewhere) and must put
// what the API says into the page as text, never as HTML.
func TestStatusPageLoadsNothingButItsScript(t *testing.T) {
	html := string(statusPageHTML)
	attr := regexp.MustCompile(`(?i)\s(src|href|action|formaction|srcset|poster|data)\s*=\s*["']?([^"'\s>]*)`)
	var refs []string
	for _, m := range attr.FindAllStringSubmatch(html, -1) {
		refs = append(refs, strings.ToLower(m[1])+"="+m[2])
	}
	if want := []string{"href=data:,", "src=statuspage.js"}; !slices.Equal(refs, want) {
		t.Errorf("the page references %q; want only %q (its script, and an empty icon so that the browser asks for no favicon)", refs, want)
	}
	scripts := regexp.MustCompile(`(?is)<script\b([^>]*)>(.*?)</script>`).FindAllStringSubmatch(html, -1)
	if len(scripts) != 1 || strings.TrimSpace(scripts[0][2]) != "" || !strings.Contains(scripts[0][1], `src="statuspage.js"`) {
		t.Errorf("want exactly one <script src=\"statuspage.js\"></script> and no inline script; got %q", scripts)
	}
	for _, banned := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)\son[a-z]+\s*=`),       // inline event handlers: blocked by the CSP
		regexp.MustCompile(`(?i)\sstyle\s*=`),          // style attributes: blocked by the CSP
		regexp.MustCompile(`(?i)(https?:)?//[a-z0-9]`), // anything from elsewhere
		regexp.MustCompile(`(?i)<(iframe|object|embed|img|link rel="stylesheet")`),
	} {
		if m := banned.FindString(html); m != "" {
			t.Errorf("the page holds %q, which its Content-Security-Policy would block or which loads from elsewhere", m)
		}
	}

	styles := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindAllStringSubmatch(html, -1)
	if len(styles) == 0 {
		t.Fatal("the page has no <style>: then it is unstyled, or its style comes from somewhere the CSP does not allow")
	}
	for _, s := range styles {
		sum := sha256.Sum256([]byte(s[1]))
		if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(statusPageCSP, "style-src "+h) {
			t.Errorf("the CSP %q does not allow the page's <style> (%s): the browser would ignore it", statusPageCSP, h)
		}
	}
	for _, directive := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "form-action 'none'", "base-uri 'none'"} {
		if !strings.Contains(statusPageCSP, directive) {
			t.Errorf("the CSP %q lacks %s", statusPageCSP, directive)
		}
	}
	if strings.Contains(statusPageCSP, "unsafe-") {
		t.Errorf("the CSP %q allows something unsafe", statusPageCSP)
	}

	js := string(statusPageJS)
	for _, banned := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
		"localStorage.", "localStorage[", "document.cookie", "http://", "https://", "location.search", "location.hash"} {
		if strings.Contains(js, banned) {
			t.Errorf("statuspage.js uses %s: data must go in as text, the token must stay in sessionStorage, nothing may come from elsewhere", banned)
		}
	}
	if !strings.Contains(js, "sessionStorage") || !strings.Contains(js, "textContent") {
		t.Error("statuspage.js no longer keeps the token in sessionStorage or writes text with textContent; update this test with it")
	}
}
