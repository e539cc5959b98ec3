package e2e

// The breaker status page (GET /admin/ on the admin listener) in a real headless Chromium,
// driven with chromedp, against a real payrouter and gatewaysim.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// pageDeadline bounds every wait for the page: it refreshes itself every 2 seconds, so what the
// API shows must be on the page within two refreshes and some slack for a loaded machine.
const pageDeadline = 8 * time.Second

// TestStatusPage: an operator opens http://<admin_listen>/admin/ in a browser.
//   - The page asks for the admin token; a wrong one gets the 401 banner and the question again,
//     and is not kept. The right one shows a row for every breaker GET /admin/breakers lists,
//     in its order and states; the token is in the tab's sessionStorage, not in the URL nor in
//     localStorage.
//   - Every button asks for confirmation naming its breaker. Force open on paywell/charge,
//     cancelled: nothing is sent, the row says so. Confirmed: the row shows it open and forced,
//     the JSON API agrees, and a charge passes paywell without calling it.
//   - ding fails for real: three charges open ding/charge, and the page shows it open with its
//     open_until and a countdown by itself, with no click (the 2-second refresh). A full-page
//     screenshot is taken then, with two breakers not closed.
//   - Reset on paywell/charge, force close then reset on ding/charge: the page and the JSON API
//     agree after each.
//   - payrouter stops: the page says the listener cannot be reached and keeps the last known
//     table, marked stale.
//
// The page must log no exception and no Content-Security-Policy violation throughout.
func TestStatusPage(t *testing.T) {
	skipIfShort(t)
	chromium := chromiumPath(t)
	began := time.Now()

	s := startSims(t)
	gw := gatewayConfig{Timeout: time.Second, MaxConcurrent: 10, ConsecutiveFailures: 3, Cooldown: 2 * time.Minute}
	pr := startPayrouter(t, s, routerConfig{
		RequestTimeout: 3 * time.Second,
		Gateways:       map[string]gatewayConfig{"paywell": gw, "ding": gw},
		Routes:         []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell", "ding"}}},
	})
	p := openBrowser(t, chromium)
	p.navigate(pr.adminURL + "/admin/")

	// The token prompt, then a wrong token.
	p.waitFor("the token prompt", func(v pageView) bool { return v.AskingToken && !v.BoardShown && len(v.Rows) == 0 })
	p.typeToken("not-the-admin-token")
	v := p.waitFor("the 401 banner after a wrong token", func(v pageView) bool {
		return v.Banner == "unauthorized" && v.AskingToken && !v.BoardShown
	})
	if v.StoredToken != "" || strings.Contains(v.URL, "not-the-admin-token") {
		t.Errorf("a refused token must not be kept: sessionStorage holds %q, the URL is %s", v.StoredToken, v.URL)
	}
	t.Logf("wrong token: %q", v.BannerText)

	// The right token: a row per breaker, as the JSON API lists them.
	p.typeToken(adminToken)
	api := breakerList(t, pr)
	v = p.waitFor("a row for every breaker GET /admin/breakers lists", func(v pageView) bool {
		return v.BoardShown && !v.AskingToken && v.Banner == "" && len(v.Rows) == len(api)
	})
	var pageNames, apiNames []string
	for i, b := range api {
		apiNames = append(apiNames, b.Name)
		pageNames = append(pageNames, v.Rows[i].Name)
		if r := v.Rows[i]; r.State != b.State || r.Requests != fmt.Sprint(b.Counts.Requests) {
			t.Errorf("row %s: state %s, requests %s; GET /admin/breakers says %s", r.Name, r.State, r.Requests, b)
		}
	}
	if !slices.Equal(pageNames, apiNames) {
		t.Errorf("the page lists %v; GET /admin/breakers lists %v", pageNames, apiNames)
	}
	if v.StoredToken != adminToken || v.LocalStorageItems != 0 || strings.Contains(v.URL, adminToken) {
		t.Errorf("the token must be in sessionStorage only: sessionStorage %q, %d localStorage item(s), URL %s",
			v.StoredToken, v.LocalStorageItems, v.URL)
	}
	if v.NotClosed != "0" || !strings.HasPrefix(v.Summary, fmt.Sprintf("All %d breakers closed", len(api))) {
		t.Errorf("summary with every breaker closed: %q (data-not-closed %q)", v.Summary, v.NotClosed)
	}
	if v.ClosedBadgeColour == "" || v.ClosedBadgeColour == "rgba(0, 0, 0, 0)" {
		t.Errorf("the closed badge has no background colour (%q): is the page's <style> blocked by its CSP?", v.ClosedBadgeColour)
	}

	// Force open paywell/charge: asked to confirm, Cancel sends nothing; OK forces it.
	p.mu.Lock()
	p.refuse = true
	p.mu.Unlock()
	p.click("paywell/charge", "force-open")
	p.waitFor("force-open cancelled on paywell/charge", func(v pageView) bool {
		return strings.Contains(v.row("paywell/charge").Result, "cancelled")
	})
	if b := pr.breaker(t, "paywell/charge"); b.State != "closed" || b.Forced != nil {
		t.Errorf("after force-open cancelled on the page, GET /admin/breakers shows %s forced %v; want closed, not forced", b, b.Forced)
	}
	p.mu.Lock()
	t.Logf("the page asked: %q", p.asked[len(p.asked)-1])
	p.refuse = false
	p.mu.Unlock()
	p.click("paywell/charge", "force-open")
	v = p.waitFor("paywell/charge shown open and forced open", func(v pageView) bool {
		r := v.row("paywell/charge")
		return r.State == "open" && r.Forced == "open" && strings.Contains(r.Result, "Forced open")
	})
	if r := v.row("paywell/charge"); !strings.Contains(r.StateText, "OPEN") || r.ForcedText != "FORCED OPEN" || r.Countdown != "until Reset" {
		t.Errorf("paywell/charge forced open reads %q %q, countdown %q; want OPEN, FORCED OPEN, until Reset", r.StateText, r.ForcedText, r.Countdown)
	}
	if b := pr.breaker(t, "paywell/charge"); b.State != "open" || b.Forced == nil || *b.Forced != "open" {
		t.Errorf("after force-open on the page, GET /admin/breakers shows %s forced %v; want open, forced open", b, b.Forced)
	}
	before := s.paywell.stats(t).Requests
	if r, a := pr.mustCharge(t, 1500, "USD", "tok_visa"); r.status != http.StatusCreated || describe(a.Attempts) != "[paywell/breaker_open ding/succeeded]" {
		t.Errorf("a charge with paywell/charge forced open: want 201 with attempts [paywell/breaker_open ding/succeeded]; got %s", r)
	}
	if after := s.paywell.stats(t).Requests; after != before {
		t.Errorf("a charge with paywell/charge forced open reached paywell %d time(s)", after-before)
	}

	// ding fails for real: its breaker opens, and the page shows it by itself.
	s.ding.behave(t, "unavailable", 0)
	for i := 1; i <= gw.ConsecutiveFailures; i++ {
		if r, a := pr.mustCharge(t, int64(1600+i), "USD", "tok_visa"); r.status != http.StatusServiceUnavailable ||
			describe(a.Attempts) != "[paywell/breaker_open ding/unavailable]" {
			t.Errorf("charge %d with paywell forced open and ding unavailable: want 503 with attempts [paywell/breaker_open ding/unavailable]; got %s", i, r)
		}
	}
	tripped := time.Now()
	ding := pr.breaker(t, "ding/charge")
	if ding.State != "open" || ding.OpenUntil == nil {
		t.Fatalf("after %d failures in a row: want ding/charge open with open_until; got %s", gw.ConsecutiveFailures, ding)
	}
	countdown := regexp.MustCompile(`^in (\d+m \d\ds|\d+s)$`)
	v = p.waitFor("ding/charge shown open with its open_until, with no click", func(v pageView) bool {
		r := v.row("ding/charge")
		return r.State == "open" && r.Forced == "" && r.OpenUntil == *ding.OpenUntil && countdown.MatchString(r.Countdown)
	})
	r := v.row("ding/charge")
	t.Logf("the page showed ding/charge open %v after it tripped, by its own refresh: %q, open until %s (%s)",
		time.Since(tripped).Round(time.Millisecond), r.StateText, r.Until, r.Countdown)
	if until, err := time.Parse(time.RFC3339, r.Until); err != nil || time.Until(until) > gw.Cooldown || time.Until(until) < 0 {
		t.Errorf("ding/charge's open_until reads %q (%v); want an RFC 3339 time within the %v cooldown", r.Until, err, gw.Cooldown)
	}
	if v.NotClosed != "2" || !strings.Contains(v.Summary, "2 of") || !strings.Contains(v.Summary, "ding/charge open") ||
		!strings.Contains(v.Summary, "paywell/charge open (forced open)") {
		t.Errorf("summary with two breakers open: %q (data-not-closed %q)", v.Summary, v.NotClosed)
	}
	shot := p.screenshot("statuspage.png")
	if err := os.WriteFile("/tmp/statuspage.png", shot, 0o644); err != nil {
		t.Logf("keeping a copy in /tmp/statuspage.png: %v", err)
	}

	// Reset paywell/charge; force close, then reset, ding/charge.
	p.click("paywell/charge", "reset")
	p.waitFor("paywell/charge shown closed after reset", func(v pageView) bool {
		r := v.row("paywell/charge")
		return r.State == "closed" && r.Forced == "" && strings.Contains(r.Result, "Reset")
	})
	if b := pr.breaker(t, "paywell/charge"); b.State != "closed" || b.Forced != nil {
		t.Errorf("after reset on the page, GET /admin/breakers shows %s forced %v; want closed, not forced", b, b.Forced)
	}
	p.click("ding/charge", "force-close")
	v = p.waitFor("ding/charge shown forced closed", func(v pageView) bool {
		r := v.row("ding/charge")
		return r.State == "closed" && r.Forced == "closed" && r.OpenUntil == ""
	})
	if b := pr.breaker(t, "ding/charge"); b.State != "closed" || b.Forced == nil || *b.Forced != "closed" {
		t.Errorf("after force-close on the page, GET /admin/breakers shows %s forced %v; want closed, forced closed", b, b.Forced)
	}
	if !strings.Contains(v.Summary, "forced closed (not protecting): ding/charge") {
		t.Errorf("summary with ding/charge forced closed: %q", v.Summary)
	}
	p.click("ding/charge", "reset")
	p.waitFor("ding/charge shown closed after reset", func(v pageView) bool {
		r := v.row("ding/charge")
		return r.State == "closed" && r.Forced == "" && strings.Contains(r.Result, "Reset")
	})
	if b := pr.breaker(t, "ding/charge"); b.State != "closed" || b.Forced != nil {
		t.Errorf("after reset on the page, GET /admin/breakers shows %s forced %v; want closed, not forced", b, b.Forced)
	}
	s.ding.behave(t, "normal", 0)

	// The listener goes away: the last known table stays, marked stale.
	if err := pr.proc.stop(); err != nil {
		t.Fatalf("stopping payrouter: %v", err)
	}
	v = p.waitFor("the unreachable banner, the table kept and marked stale", func(v pageView) bool {
		return v.Banner == "unreachable" && v.Stale && v.BoardShown && len(v.Rows) == len(api) && strings.HasPrefix(v.Updated, "STALE")
	})
	t.Logf("listener gone: %q; %q", v.BannerText, v.Updated)
	p.screenshot("statuspage-stale.png")

	p.checkConsole()
	t.Logf("the status page test took %v", time.Since(began).Round(time.Millisecond))
}

// chromiumPath finds Debian's chromium. Without it the test fails under CI (.ci/run installs it)
// and skips elsewhere, saying how to install it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	const install = "apt-get install -y chromium"
	if os.Getenv("CI") != "" {
		t.Fatalf("chromium is not on PATH: .ci/run installs it (`need chromium chromium`, that is %s); the status page test needs it", install)
	}
	t.Skipf("chromium is not on PATH; to run the status page's browser test: %s", install)
	return ""
}

// browserPage is one tab of a headless Chromium of its own.
type browserPage struct {
	t       *testing.T
	ctx     context.Context
	out     *output // the browser's own output, shown when the test fails
	mu      sync.Mutex
	console []chromedp.ConsoleMessage
	// asked are the questions of the confirmation dialogs the page opened, in order; each is
	// answered OK, or Cancel while refuse is set, as an operator would.
	asked  []string
	refuse bool
}

// openBrowser starts chromium headless with a fresh profile in t.TempDir(); t.Cleanup closes it.
func openBrowser(t *testing.T, chromium string) *browserPage {
	t.Helper()
	p := &browserPage{t: t, out: &output{}}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root in CI, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium-profile")),
		chromedp.WindowSize(1280, 800),
		chromedp.CombinedOutput(p.out),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	p.ctx = ctx
	t.Cleanup(func() {
		closing, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := chromedp.Cancel(closing); err != nil {
			t.Logf("closing chromium: %v", err)
		}
		cancelTab()
		cancelAlloc() // waits for the browser to exit, before t.TempDir() is removed
		if t.Failed() {
			t.Logf("----- chromium's output -----\n%s", p.out.tail(60))
			p.mu.Lock()
			for _, m := range p.console {
				t.Logf("console %s", m)
			}
			p.mu.Unlock()
		}
	})
	// Subscribe before the first navigation, so that no message is lost. Console starts the
	// browser.
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return // the tab closed
			}
			p.mu.Lock()
			p.console = append(p.console, m)
			p.mu.Unlock()
		}
	}()
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return // the tab closed
			}
			p.mu.Lock()
			p.asked = append(p.asked, ev.Message)
			accept := !p.refuse
			p.mu.Unlock()
			if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept}); err != nil {
				return
			}
		}
	}()
	return p
}

// do runs actions on the tab, ending the test if they fail.
func (p *browserPage) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("browser: %s: %v", what, err)
	}
}

func (p *browserPage) navigate(url string) {
	p.t.Helper()
	p.do("opening "+url, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS("body")))
}

// typeToken types a token into the prompt and presses its button, as an operator would.
func (p *browserPage) typeToken(token string) {
	p.t.Helper()
	p.do("entering the admin token",
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("token-submit")))
}

// click presses one of a breaker's buttons: force-open, force-close or reset, and answers the
// confirmation the page asks (OK, or Cancel with p.refuse), which must name the breaker.
func (p *browserPage) click(breaker, action string) {
	p.t.Helper()
	p.mu.Lock()
	before := len(p.asked)
	p.mu.Unlock()
	sel := fmt.Sprintf(`#breaker-rows tr[data-breaker=%q] button[data-action=%q]`, breaker, action)
	p.do("clicking "+action+" on "+breaker, chromedp.WaitEnabled(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
	eventually(p.t, pageDeadline, action+" on "+breaker+" asks for confirmation", func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.asked) != before+1 {
			return false, fmt.Sprintf("%d dialog(s) since the click", len(p.asked)-before)
		}
		return strings.Contains(p.asked[before], breaker), fmt.Sprintf("asked %q", p.asked[before])
	})
}

// pageView is what the page shows, read from the DOM.
type pageView struct {
	Banner            string    `json:"banner"` // data-kind of the visible banner, "" when none
	BannerText        string    `json:"bannerText"`
	AskingToken       bool      `json:"askingToken"`
	BoardShown        bool      `json:"boardShown"`
	Stale             bool      `json:"stale"`
	Summary           string    `json:"summary"`
	NotClosed         string    `json:"notClosed"`
	Updated           string    `json:"updated"`
	URL               string    `json:"url"`
	StoredToken       string    `json:"storedToken"`
	LocalStorageItems int       `json:"localStorageItems"`
	ClosedBadgeColour string    `json:"closedBadgeColour"`
	Rows              []pageRow `json:"rows"`
}

// pageRow is one breaker's row.
type pageRow struct {
	Name        string `json:"name"`
	State       string `json:"state"`
	Forced      string `json:"forced"`
	OpenUntil   string `json:"openUntil"`
	StateText   string `json:"stateText"`
	ForcedText  string `json:"forcedText"`
	Requests    string `json:"requests"`
	Failures    string `json:"failures"`
	Consecutive string `json:"consecutive"`
	Until       string `json:"until"`
	Countdown   string `json:"countdown"`
	Result      string `json:"result"`
}

func (v pageView) row(name string) pageRow {
	for _, r := range v.Rows {
		if r.Name == name {
			return r
		}
	}
	return pageRow{}
}

func (v pageView) String() string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// readPage is the script that reads a pageView from the DOM.
const readPage = `(() => {
  const text = (root, sel) => { const e = root.querySelector(sel); return e ? e.textContent : ''; };
  const banner = document.getElementById('banner');
  const badge = document.querySelector('.state-closed');
  return {
    banner: banner.hidden ? '' : (banner.dataset.kind || '?'),
    bannerText: banner.hidden ? '' : banner.textContent,
    askingToken: !document.getElementById('token-form').hidden,
    boardShown: !document.getElementById('board').hidden,
    stale: document.getElementById('breakers').dataset.stale === 'true',
    summary: text(document, '#summary'),
    notClosed: document.getElementById('summary').dataset.notClosed || '',
    updated: text(document, '#updated'),
    url: location.href,
    storedToken: sessionStorage.getItem('payrouter.admin_token') || '',
    localStorageItems: localStorage.length,
    closedBadgeColour: badge ? getComputedStyle(badge).backgroundColor : '',
    rows: Array.from(document.querySelectorAll('#breaker-rows tr')).map(tr => {
      const forced = tr.querySelector('.forced');
      return {
        name: tr.dataset.breaker || '', state: tr.dataset.state || '', forced: tr.dataset.forced || '',
        openUntil: tr.dataset.openUntil || '', stateText: text(tr, '.state'),
        forcedText: forced && !forced.hidden ? forced.textContent : '',
        requests: text(tr, '[data-count="requests"]'), failures: text(tr, '[data-count="failures"]'),
        consecutive: text(tr, '[data-count="consecutive_failures"]'),
        until: text(tr, 'time'), countdown: text(tr, '.countdown'), result: text(tr, '[data-result]'),
      };
    }),
  };
})()`

func (p *browserPage) view() pageView {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[pageView](readPage))
	if err != nil {
		p.t.Fatalf("browser: reading the page: %v", err)
	}
	return v
}

// waitFor polls the page until cond holds, within pageDeadline, and returns what it saw.
func (p *browserPage) waitFor(what string, cond func(pageView) bool) pageView {
	p.t.Helper()
	var v pageView
	eventually(p.t, pageDeadline, what, func() (bool, string) {
		v = p.view()
		return cond(v), v.String()
	})
	return v
}

// screenshot takes a full-page PNG, checks it, and writes it to $PAYROUTER_SCREENSHOT_DIR, or to
// the test's temporary directory.
func (p *browserPage) screenshot(name string) []byte {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		p.t.Fatalf("browser: screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		p.t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 300 || b.Dx() > 4000 || b.Dy() > 10000 {
		p.t.Errorf("the screenshot is %dx%d; want about the 1280-wide window, the page's full height", b.Dx(), b.Dy())
	}
	if colours := distinctColours(img, 64); colours < 8 {
		p.t.Errorf("the screenshot has %d colour(s): a blank page?", colours)
	}
	dir := os.Getenv("PAYROUTER_SCREENSHOT_DIR")
	if dir == "" {
		dir = p.t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot (%dx%d, %d bytes): %s", img.Bounds().Dx(), img.Bounds().Dy(), len(shot), path)
	return shot
}

// distinctColours counts the colours of img, up to limit.
func distinctColours(img image.Image, limit int) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}

// checkConsole fails the test on any exception the page threw and on any Content-Security-Policy
// violation: either means something on the page does not work. The refused token's 401 and the
// stopped listener's connection errors are expected there and are not checked.
func (p *browserPage) checkConsole() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.console {
		if m.IsException() || strings.Contains(m.Text, "Content Security Policy") || strings.Contains(m.Text, "Content-Security-Policy") {
			p.t.Errorf("the page logged %s (%s:%d)", m, m.URL, m.Line)
		}
	}
}

// breakerList is GET /admin/breakers in its order.
func breakerList(t *testing.T, in *instance) []breakerView {
	t.Helper()
	r, err := send(in.probeClient, "GET", in.adminURL+"/admin/breakers", nil, "Authorization", "Bearer "+adminToken)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Breakers []breakerView `json:"breakers"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil || len(list.Breakers) == 0 {
		t.Fatalf("want 200 with {\"breakers\": [...]}: %s", r)
	}
	return list.Breakers
}
