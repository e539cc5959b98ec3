package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestBenchHealthyPath measures what payrouter adds to a charge when all is well: POST /charge
// through payrouter to the simulated Paywell, against the same load sending the simulator's own
// POST /v1/charges directly, with the form payrouter's adapter sends. The difference is
// payrouter's own latency (its HTTP hop, decoding, idempotency, routing, the guard, the adapter,
// and storing the charge), the figure a storefront adds to every payment by putting payrouter
// in front of its gateways.
func TestBenchHealthyPath(t *testing.T) {
	requireBench(t)
	s := startStack(t)

	router := s.payrouterCharge(http.StatusCreated)
	// The form of paywell.Client.Authorize for chargeBody, so that the simulator does the same
	// work either way.
	form := url.Values{
		"amount": {"1999"}, "currency": {"usd"}, "source": {"tok_visa"}, "capture": {"true"}, "description": {"bench"},
	}
	direct := Target{
		Name: "paywell direct", URL: "http://" + s.sims["paywell"] + "/v1/charges", Body: []byte(form.Encode()), Want: http.StatusOK,
		Header: http.Header{
			"Authorization": {"Bearer " + gatewayKey("paywell")},
			"Content-Type":  {"application/x-www-form-urlencoded"},
		},
	}

	// One answer of each looked at in full; the measured ones are checked by status only.
	checkSucceededAtPaywell(t, router)
	_, body := one(t, direct)
	var pw struct {
		Status   string `json:"status"`
		Captured bool   `json:"captured"`
	}
	if err := json.Unmarshal(body, &pw); err != nil || pw.Status != "succeeded" || !pw.Captured {
		t.Fatalf("paywell's direct charge did not succeed (%v): %s", err, body)
	}
	sent := 2 // the two above

	tab := newTable(t.Output(), "(b) healthy path: POST /charge through payrouter to the paywell simulator vs the simulator's POST /v1/charges directly", true)
	var measured []string
	for _, workers := range concurrencies {
		c := compareAt(t, direct, router, workers)
		all := append(append(append(c.Base, c.Subject...), c.WarmBase), c.WarmSubject)
		sent += Merge(all...).Requests
		tab.add(workers, "paywell direct", "payrouter", c)
		b, p := Merge(c.Base...), Merge(c.Subject...)
		measured = append(measured, fmt.Sprintf("%.2fx and %s p50 with %s", p.Rate()/b.Rate(),
			formatDifference(p.Quantile(0.5)-b.Quantile(0.5)), workersText(workers)))
	}
	tab.flush()
	fmt.Fprintf(t.Output(), "goal (b): payrouter / paywell direct req/s >= 0.50x with 16 workers, p50 at most +150µs with 1; measured %s\n",
		strings.Join(measured, ", "))

	// Every charge through payrouter was one call to paywell, no retry, no status look-up, and
	// nothing went to the other gateways: otherwise the comparison would not be like for like.
	if t.Failed() {
		return
	}
	if n := s.simRequests(t, "paywell"); n != sent {
		t.Errorf("paywell received %d API calls for %d charges; want one each", n, sent)
	}
	for _, name := range gatewayNames[1:] {
		if n := s.simRequests(t, name); n != 0 {
			t.Errorf("%s received %d API calls; every charge should have succeeded at paywell", name, n)
		}
	}
}

// checkSucceededAtPaywell sends target's charge once and fails the test unless it succeeded at
// paywell in one attempt: the healthy path that the measurements repeat.
func checkSucceededAtPaywell(t *testing.T, target Target) {
	t.Helper()
	_, body := one(t, target)
	var ch struct {
		Status   string `json:"status"`
		Gateway  string `json:"gateway"`
		Attempts []struct {
			Outcome string `json:"outcome"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal(body, &ch); err != nil || ch.Status != "succeeded" || ch.Gateway != "paywell" || len(ch.Attempts) != 1 {
		t.Fatalf("%s: the charge did not succeed at paywell in one attempt (%v): %s", target.Name, err, body)
	}
}
