package e2e

// The storefront webhooks (docs/webhooks.md), end to end: real payrouter processes push their
// events to receivers in this test process, which verify every delivery with the Standard
// Webhooks Go library, as a storefront would, and deduplicate by webhook-id.

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// hookEvent is one event as a receiver got it.
type hookEvent struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	CreatedAt string `json:"created_at"`
	Data      struct {
		Object struct {
			ID       string `json:"id"`
			Status   string `json:"status"`
			ChargeID string `json:"charge_id"`
		} `json:"object"`
	} `json:"data"`
}

// Modes of a receiver.
const (
	receiverOK    = "ok"    // verifies, records, answers 204
	receiverReset = "reset" // closes the connection without an answer: the storefront is down
	receiverHang  = "hang"  // never answers, until the test ends
	receiverSlow  = "slow"  // answers 204 after slowFor, and processes nothing whose sender left before
)

// receiver is a storefront's webhook endpoint: it verifies each delivery's signature with the
// Standard Webhooks library and keeps the first of each webhook-id.
type receiver struct {
	name, secret string
	srv          *httptest.Server
	wh           *standardwebhooks.Webhook
	mode         atomic.Value
	slowFor      time.Duration
	release      chan struct{}

	mu         sync.Mutex
	events     map[string]hookEvent // by webhook-id, the first delivery of each
	arrived    map[string]time.Time // by webhook-id, when its first delivery arrived
	order      []string
	verified   int // deliveries verified, duplicates included
	duplicates int
	refused    int // requests that arrived while down
	hanging    int // requests held in hang mode
	abandoned  int // slow requests whose sender went away before the answer
	badSig     []string
}

func newReceiver(t *testing.T, name string) *receiver {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	r := &receiver{name: name, secret: "whsec_" + base64.StdEncoding.EncodeToString(key), events: map[string]hookEvent{}, arrived: map[string]time.Time{},
		release: make(chan struct{}), slowFor: time.Second}
	var err error
	if r.wh, err = standardwebhooks.NewWebhook(r.secret); err != nil {
		t.Fatal(err)
	}
	r.mode.Store(receiverOK)
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		close(r.release)
		r.srv.Close()
	})
	return r
}

func (r *receiver) set(mode string) { r.mode.Store(mode) }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	switch r.mode.Load().(string) {
	case receiverReset:
		r.mu.Lock()
		r.refused++
		r.mu.Unlock()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	case receiverHang:
		r.mu.Lock()
		r.hanging++
		r.mu.Unlock()
		select {
		case <-req.Context().Done():
		case <-r.release:
		}
		return
	case receiverSlow:
		select {
		case <-time.After(r.slowFor):
		case <-req.Context().Done():
			// Its sender went away mid-delivery (killed): never processed, as a storefront
			// that had not answered yet would not have.
			r.mu.Lock()
			r.abandoned++
			r.mu.Unlock()
			return
		case <-r.release:
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.wh.Verify(body, req.Header); err != nil {
		r.badSig = append(r.badSig, fmt.Sprintf("%s: %v", req.Header.Get("webhook-id"), err))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.verified++
	id := req.Header.Get("webhook-id")
	if _, seen := r.events[id]; seen {
		r.duplicates++
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var ev hookEvent
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID != id {
		r.badSig = append(r.badSig, fmt.Sprintf("%s: a body that is not its event: %s", id, excerpt(body)))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.events[id] = ev
	r.arrived[id] = at
	r.order = append(r.order, id)
	w.WriteHeader(http.StatusNoContent)
}

// finalArrival returns when the first final event (finalEvents) of the charge id arrived, and
// its type; ok is false while none has.
func (r *receiver) finalArrival(chargeID string) (at time.Time, typ string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range r.order {
		if ev := r.events[id]; ev.Data.Object.ID == chargeID && slices.Contains(finalEvents, ev.Type) {
			return r.arrived[id], ev.Type, true
		}
	}
	return time.Time{}, "", false
}

// snapshot returns the events received so far, in the order first received.
func (r *receiver) snapshot() []hookEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]hookEvent, len(r.order))
	for i, id := range r.order {
		out[i] = r.events[id]
	}
	return out
}

func (r *receiver) counts() (verified, unique, duplicates, refused, hanging int, bad []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.verified, len(r.events), r.duplicates, r.refused, r.hanging, slices.Clone(r.badSig)
}

// hookEndpoint is one webhooks.endpoints entry of the configuration a test writes.
type hookEndpoint struct {
	r             *receiver
	timeout       time.Duration
	maxConcurrent int
}

// withWebhooks edits the harness's configuration: apiKey gets the name "shop" (webhooks pick
// their events by a key's name), and the endpoints are added, on loopback (allow_private).
func withWebhooks(endpoints ...hookEndpoint) func(string) string {
	return func(text string) string {
		named := fmt.Sprintf("  api_keys: [{name: shop, key: %q}, %q]", apiKey, otherAPIKey)
		text = strings.Replace(text, fmt.Sprintf("  api_keys: [%q, %q]", apiKey, otherAPIKey), named, 1)
		var b strings.Builder
		b.WriteString(text)
		b.WriteString("webhooks:\n  allow_private: true\n  poll_interval: 200ms\n  endpoints:\n")
		for _, e := range endpoints {
			fmt.Fprintf(&b, "    - {name: %s, url: %q, key_name: shop, secrets: [%q], timeout: %s, max_concurrent: %d}\n",
				e.r.name, e.r.srv.URL+"/payrouter/webhooks", e.r.secret, e.timeout, e.maxConcurrent)
		}
		return b.String()
	}
}

// hookMetrics sums payrouter_webhook_deliveries_total by result over instances.
func hookMetrics(t *testing.T, endpoint string, ins ...*instance) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, in := range ins {
		m, err := in.metrics()
		if err != nil {
			t.Logf("metrics of %s: %v", in.proc.name, err)
			continue
		}
		for _, s := range m {
			if s.name == "payrouter_webhook_deliveries_total" && s.labels["endpoint"] == endpoint {
				out[s.labels["result"]] += s.value
			}
			if s.name == "payrouter_webhook_dispatched_total" && s.labels["endpoint"] == endpoint {
				out["dispatched"] += s.value
			}
		}
	}
	return out
}

// logHookCounts logs what was sent and what came of it: the note's figures.
func logHookCounts(t *testing.T, r *receiver, m map[string]float64) {
	t.Helper()
	verified, unique, dups, refused, hanging, bad := r.counts()
	sent := m["delivered"] + m["retried"] + m["dead_lettered"] + m["disabled"]
	t.Logf("webhooks to %s: %v deliveries queued, %v attempts sent: %v delivered, %v retried, %v dead-lettered, %v disabled; "+
		"the receiver verified %d (%d events, %d duplicates), refused %d while down, held %d hanging, %d bad",
		r.name, m["dispatched"], sent, m["delivered"], m["retried"], m["dead_lettered"], m["disabled"], verified, unique, dups, refused, hanging, len(bad))
}

// finalEvents are the charge events that end a processing charge.
var finalEvents = []string{"charge.succeeded", "charge.failed", "charge.declined", "charge.requires_capture"}

// TestWebhooksDeliverEveryIncidentOutcome: during a slow-gateway incident every charge answers
// 202 processing; once the gateway recovers the reconciler settles them, and each one reaches the
// storefront's endpoint as a final event, signed (verified with the Standard Webhooks library),
// its object's status the charge's, although the endpoint was down when they were first sent (its
// connections reset: retried on the schedule) and although another endpoint of the same key hangs
// the whole time (its slots are its own; it never delays the first).
func TestWebhooksDeliverEveryIncidentOutcome(t *testing.T) {
	skipIfShort(t)
	shop := newReceiver(t, "shop")
	stuck := newReceiver(t, "stuck")
	stuck.set(receiverHang)
	s := startSims(t)
	pr := startPayrouterEdited(t, s, routerConfig{
		RequestTimeout: 2 * time.Second,
		Gateways: map[string]gatewayConfig{
			// The breaker never opens: every charge of the incident reaches paywell and times out.
			"paywell": {Timeout: 500 * time.Millisecond, MaxConcurrent: 40, ConsecutiveFailures: 1000, Cooldown: 30 * time.Second},
		},
		Routes: []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell"}}},
	}, withWebhooks(hookEndpoint{shop, 3 * time.Second, 10}, hookEndpoint{stuck, 2 * time.Second, 2}))

	// The incident: paywell answers after 3 s, past its 500 ms timeout and the look-up's.
	s.paywell.behave(t, "normal", 3*time.Second)
	const charges = 20
	ids := make([]string, charges)
	var wg sync.WaitGroup
	for i := range charges {
		wg.Go(func() {
			r, err := pr.charge(int64(1000+i), "USD", "tok_visa")
			if err != nil {
				t.Errorf("charge %d: %v", i, err)
				return
			}
			a, err := decodeAnswer(r)
			if err != nil || r.status != http.StatusAccepted || a.ChargeStatus != "processing" {
				t.Errorf("charge %d during the incident: want 202 processing: %s", i, r)
				return
			}
			ids[i] = a.ID
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// The storefront's endpoint goes down as paywell recovers: the outcomes' first attempts fail.
	shop.set(receiverReset)
	s.paywell.behave(t, "normal", 0)
	eventually(t, 30*time.Second, "the first attempts reach the endpoint while it is down", func() (bool, string) {
		_, _, _, refused, _, _ := shop.counts()
		return refused >= 3, fmt.Sprintf("%d refused", refused)
	})
	shop.set(receiverOK)

	final := map[string]hookEvent{}
	eventually(t, 2*time.Minute, "every 202 reaches the endpoint as a final event", func() (bool, string) {
		for _, ev := range shop.snapshot() {
			if slices.Contains(finalEvents, ev.Type) {
				final[ev.Data.Object.ID] = ev
			}
		}
		var missing []string
		for _, id := range ids {
			if _, ok := final[id]; !ok {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d of %d charges without a final event, %s first", len(missing), charges, strings.Join(missing[:min(len(missing), 3)], ", "))
	})
	m := hookMetrics(t, "shop", pr)
	logHookCounts(t, shop, m)
	logHookCounts(t, stuck, hookMetrics(t, "stuck", pr))

	for _, id := range ids {
		got, err := pr.getCharge(id)
		if err != nil {
			t.Fatal(err)
		}
		ev := final[id]
		if ev.Data.Object.Status != got.ChargeStatus || ev.Type != "charge."+got.ChargeStatus {
			t.Errorf("charge %s is %s; its webhook said %s with the object %s", id, got.ChargeStatus, ev.Type, ev.Data.Object.Status)
		}
	}
	if _, _, _, _, _, bad := shop.counts(); len(bad) > 0 {
		t.Errorf("deliveries the Standard Webhooks library refused: %v", bad)
	}
	if m["retried"] == 0 {
		t.Errorf("no attempt to shop was retried, though its first attempts were refused: %v", m)
	}
	if m["dead_lettered"]+m["disabled"] != 0 {
		t.Errorf("deliveries to shop given up: %v", m)
	}
	// The hanging endpoint held its own two slots, and no more, the whole time.
	if _, _, _, _, hanging, _ := stuck.counts(); hanging == 0 {
		t.Error("the hanging endpoint was never sent anything: the test proved nothing about it")
	}
}

// eventsOf lists every event of apiKey's feed through in (GET /events, paged).
func eventsOf(t *testing.T, in *instance) []hookEvent {
	t.Helper()
	var out []hookEvent
	after := ""
	for {
		url := in.url + "/events?limit=100"
		if after != "" {
			url += "&starting_after=" + after
		}
		r, err := send(in.client, "GET", url, nil, "Authorization", "Bearer "+apiKey)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("GET /events: %v %s", err, r)
		}
		var page struct {
			Data    []hookEvent `json:"data"`
			HasMore bool        `json:"has_more"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Data...)
		if !page.HasMore || len(page.Data) == 0 {
			return out
		}
		after = page.Data[len(page.Data)-1].ID
	}
}

// TestWebhooksSurviveAnInstanceKilled: two instances on one PostgreSQL change charges and
// deliver their events; one is killed (SIGKILL) while it has deliveries in flight to a slow
// endpoint. Every event of the feed, whichever instance wrote it, still reaches the endpoint at
// least once: the killed instance's deliveries are handed to the other once idle, and its
// duplicates are told apart by webhook-id.
func TestWebhooksSurviveAnInstanceKilled(t *testing.T) {
	skipIfShort(t)
	shop := newReceiver(t, "shop")
	shop.slowFor = 1500 * time.Millisecond
	shop.set(receiverSlow)
	s := startSims(t)
	cfg := routerConfig{
		RequestTimeout: 3 * time.Second, DatabaseURL: pgtest.NewDatabase(t),
		Gateways: map[string]gatewayConfig{
			"paywell": {Timeout: time.Second, MaxConcurrent: 40, ConsecutiveFailures: 1000, Cooldown: 30 * time.Second},
		},
		Routes: []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell"}}},
	}
	edit := withWebhooks(hookEndpoint{shop, 3 * time.Second, 10})
	a := startPayrouterEdited(t, s, cfg, edit)
	a.proc.name = "payrouter-A"
	b := startPayrouterEdited(t, s, cfg, edit)
	b.proc.name = "payrouter-B"

	charge := func(in *instance, n int) {
		for i := range n {
			r, err := in.charge(int64(2000+i), "USD", "tok_visa")
			if err != nil || r.status != http.StatusCreated {
				t.Fatalf("charge through %s: %v %s", in.proc.name, err, r)
			}
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { charge(a, 20) })
	wg.Go(func() { charge(b, 20) })
	wg.Wait()

	// A holds attempts in flight to the slow endpoint: it is killed now.
	eventually(t, 30*time.Second, "payrouter-A has deliveries in flight", func() (bool, string) {
		m, err := a.metrics()
		if err != nil {
			return false, err.Error()
		}
		for _, s := range m {
			if s.name == "payrouter_webhook_in_flight" && s.labels["endpoint"] == "shop" && s.value > 0 {
				return true, ""
			}
		}
		return false, "none in flight"
	})
	a.kill(t)
	killedAt := time.Now()
	charge(b, 10) // the feed goes on through the instance left

	want := eventsOf(t, b)
	if len(want) < 50 {
		t.Fatalf("the feed holds %d events; want one per charge (50)", len(want))
	}
	eventually(t, 3*time.Minute, "every event of the feed reaches the endpoint", func() (bool, string) {
		got := map[string]bool{}
		for _, ev := range shop.snapshot() {
			got[ev.ID] = true
		}
		var missing []string
		for _, ev := range want {
			if !got[ev.ID] {
				missing = append(missing, ev.ID)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d of %d events missing", len(missing), len(want))
	})
	m := hookMetrics(t, "shop", b)
	logHookCounts(t, shop, m)
	shop.mu.Lock()
	abandoned := shop.abandoned
	shop.mu.Unlock()
	t.Logf("payrouter-A was killed with %d deliveries under way at the endpoint; every event was in within %v of the kill",
		abandoned, time.Since(killedAt).Round(time.Second))
	if abandoned == 0 {
		t.Error("no delivery was under way when payrouter-A was killed: the test proved nothing about one killed mid-delivery")
	}
	if _, _, _, _, _, bad := shop.counts(); len(bad) > 0 {
		t.Errorf("deliveries the Standard Webhooks library refused: %v", bad)
	}
	for _, ev := range shop.snapshot() {
		if !slices.ContainsFunc(want, func(w hookEvent) bool { return w.ID == ev.ID && w.Type == ev.Type }) {
			t.Errorf("the endpoint got %s (%s), which the feed does not list", ev.ID, ev.Type)
		}
	}
}
