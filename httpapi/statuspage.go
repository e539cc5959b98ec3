package httpapi

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/labstack/echo/v5"
)

// The breaker status page of the admin listener: GET /admin/ and its script. A browser's
// navigation cannot send a Bearer header, so the page carries no data and needs no token: it is
// the same static file for everyone, and its script asks for the token and calls the token-guarded
// admin API (GET /admin/breakers, POST /admin/breakers/...) itself, holding the token in the tab's
// sessionStorage only.

//go:embed statuspage.html
var statusPageHTML []byte

//go:embed statuspage.js
var statusPageJS []byte

// statusPageCSP lets the page run nothing but its own script and its own inline style (allowed by
// hash, so that no other inline style or script can run), and talk to nothing but this listener.
var statusPageCSP = "default-src 'none'; script-src 'self'; connect-src 'self'; img-src data:; " +
	"style-src " + strings.Join(styleHashes(statusPageHTML), " ") + "; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// styleHashes returns the CSP source ('sha256-...') of every <style> element of an HTML page.
func styleHashes(html []byte) []string {
	var out []string
	for rest := html; ; {
		_, after, ok := bytes.Cut(rest, []byte("<style>"))
		if !ok {
			break
		}
		body, next, ok := bytes.Cut(after, []byte("</style>"))
		if !ok {
			break
		}
		sum := sha256.Sum256(body)
		out = append(out, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
		rest = next
	}
	if len(out) == 0 {
		return []string{"'none'"}
	}
	return out
}

// setStatusPageHeaders makes the page and its script never cached (a stale script would talk to
// a changed API), never framed (the buttons must not be clickjacked) and never sniffed.
func setStatusPageHeaders(h http.Header) {
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", statusPageCSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// statusPage is GET /admin/: the breaker status page.
func (s *server) statusPage(c *echo.Context) error {
	setStatusPageHeaders(c.Response().Header())
	return c.Blob(http.StatusOK, "text/html; charset=utf-8", statusPageHTML)
}

// statusPageScript is GET /admin/statuspage.js: the page's script.
func (s *server) statusPageScript(c *echo.Context) error {
	setStatusPageHeaders(c.Response().Header())
	return c.Blob(http.StatusOK, "text/javascript; charset=utf-8", statusPageJS)
}
