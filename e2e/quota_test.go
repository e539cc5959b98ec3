package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// quotaMaxMemory is state.max_memory in TestOneKeyCannotHarmAnothersRecords: 2 MiB for each of
// the harness's two API keys.
const (
	quotaMaxMemory = "4MiB"
	quotaShare     = 2 << 20
)

// TestOneKeyCannotHarmAnothersRecords is issue 19's "one key can harm another in memory", on the
// real binary with two API keys sharing state.max_memory. Key A fills its share with
// authorizations nobody captures and declines, all with the largest metadata the API accepts;
// its next charge answers 503 state-unavailable naming state.max_memory, and what it holds
// stays (its authorizations readable and voidable, its keys replayed). Meanwhile and after, A
// goes on sending 1-cent declines: key B's charges keep succeeding, and B's captured charge of
// 5000, made before A began, stays readable and refundable.
func TestOneKeyCannotHarmAnothersRecords(t *testing.T) {
	skipIfShort(t)
	gw := gatewayConfig{Timeout: 2 * time.Second, MaxConcurrent: 16, ConsecutiveFailures: 50, Cooldown: 30 * time.Second}
	s := startSims(t)
	pr := startPayrouterEdited(t, s, routerConfig{
		RequestTimeout: 5 * time.Second,
		Gateways:       map[string]gatewayConfig{"paywell": gw},
		Routes:         []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell"}}},
	}, func(yaml string) string {
		return strings.Replace(yaml, "state:\n", "state:\n  max_memory: "+quotaMaxMemory+"\n", 1)
	})
	as := func(key, method, path, idemKey string, body []byte) reply {
		t.Helper()
		h := []string{"Authorization", "Bearer " + key}
		if idemKey != "" {
			h = append(h, "Idempotency-Key", idemKey)
		}
		if body != nil {
			h = append(h, "Content-Type", "application/json")
		}
		r, err := send(pr.client, method, pr.url+path, body, h...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	idOf := func(r reply) string {
		t.Helper()
		a, err := decodeAnswer(r)
		if err != nil || a.chargeID() == "" {
			t.Fatalf("no charge id in %s", r)
		}
		return a.chargeID()
	}

	// B's captured charge, made before A begins.
	r := as(otherAPIKey, "POST", "/charge", "b-captured", chargeBody(5000, "USD", "tok_visa", ""))
	if r.status != 201 {
		t.Fatalf("B's charge: %s", r)
	}
	bCaptured := idOf(r)

	// A fills its share: two authorizations for each decline, every one the largest body.
	var auths []string
	var refusal reply
	declines := 0
	for i := 0; refusal.status == 0; i++ {
		if i > 2000 {
			t.Fatalf("A sent %d charges of the largest kind (%d authorizations held) and none was refused: its share of %d bytes does not bound it",
				i, len(auths), quotaShare)
		}
		token, capture, want := "tok_visa", false, 201
		if i%3 == 2 {
			token, want = "tok_decline", 402
		}
		r := as(apiKey, "POST", "/charge", fmt.Sprintf("a-%d", i), largestBody(token, capture))
		switch r.status {
		case want:
			if want == 201 {
				auths = append(auths, idOf(r))
			} else {
				declines++
			}
		case 503:
			refusal = r
		default:
			t.Fatalf("A's charge %d: want %d or 503, got %s", i, want, r)
		}
	}
	t.Logf("A held %d authorizations and made %d declines of the largest kind before its first 503", len(auths), declines)
	var p struct {
		Type, Detail string
	}
	if err := json.Unmarshal(refusal.body, &p); err != nil || p.Type != "/problems/state-unavailable" ||
		!strings.Contains(p.Detail, "state.max_memory") || refusal.header.Get("Retry-After") != "2" {
		t.Fatalf("A's refusal: want 503 state-unavailable naming state.max_memory with Retry-After: 2, got %s (Retry-After %q)",
			refusal, refusal.header.Get("Retry-After"))
	}
	// 2 MiB hold about 200 of these with their keys; far fewer would mean another key's bytes,
	// or a count, bound A.
	if len(auths) < 100 {
		t.Errorf("A held only %d authorizations before its 503, want about 200 in its 2 MiB", len(auths))
	}

	// A goes on with 1-cent declines (issue 19: 55 of them dropped B's captured charge); B's
	// charges go on meanwhile and keep succeeding.
	for i := range 60 {
		if r := as(apiKey, "POST", "/charge", fmt.Sprintf("a-cent-%d", i), chargeBody(1, "USD", "tok_decline", "")); r.status != 503 && r.status != 402 {
			t.Fatalf("A's 1-cent decline %d: want 503 (its share full) or 402, got %s", i, r)
		}
		if i%2 == 0 {
			if r := as(otherAPIKey, "POST", "/charge", fmt.Sprintf("b-%d", i), chargeBody(1999, "USD", "tok_visa", "")); r.status != 201 {
				t.Fatalf("B's charge %d beside A's full share: want 201, got %s", i/2, r)
			}
		}
	}
	if r := as(otherAPIKey, "POST", "/charge", "b-large", largestBody("tok_visa", true)); r.status != 201 {
		t.Fatalf("B's charge of the largest kind beside A's full share: want 201, got %s", r)
	}

	// B's captured charge stays, readable and refundable in full.
	if r := as(otherAPIKey, "GET", "/charge/"+bCaptured, "", nil); r.status != 200 || !strings.Contains(string(r.body), `"status":"succeeded"`) {
		t.Fatalf("B's captured charge after A's flood: want 200 succeeded, got %s", r)
	}
	if r := as(otherAPIKey, "POST", "/charge/"+bCaptured+"/refund", "b-refund", []byte(`{"amount":5000}`)); r.status != 201 || !strings.Contains(string(r.body), `"status":"succeeded"`) {
		t.Fatalf("B's refund of its captured charge after A's flood: want 201 succeeded, got %s", r)
	}

	// What A holds stays A's: its authorizations are read, its first key replays, and the keys'
	// reserve lets it void what fills its share.
	for _, id := range []string{auths[0], auths[len(auths)-1]} {
		if r := as(apiKey, "GET", "/charge/"+id, "", nil); r.status != 200 || !strings.Contains(string(r.body), `"status":"requires_capture"`) {
			t.Fatalf("A's authorization %s: want 200 requires_capture, got %s", id, r)
		}
	}
	if r := as(apiKey, "POST", "/charge/"+auths[0]+"/void", "a-void-0", nil); r.status != 200 || !strings.Contains(string(r.body), `"status":"voided"`) {
		t.Fatalf("A's void of its first authorization with its share full: want 200 voided, got %s", r)
	}
	if r := as(apiKey, "POST", "/charge", "a-0", largestBody("tok_visa", false)); r.status != 201 ||
		r.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(r.body), `"status":"voided"`) || !strings.Contains(string(r.body), strings.Repeat("a", 164)) {
		t.Fatalf("A's first key again: want its charge replayed as it stands, voided, metadata and all; got %s", r)
	}

	sc, err := pr.metrics()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := sc.value("payrouter_rate_limited_total", "reason", "key_memory"); n < 1 {
		t.Errorf("payrouter_rate_limited_total{reason=key_memory} = %.0f, want at least 1", n)
	}
	if share, _ := sc.value("payrouter_memstore_key_limit_bytes"); share != quotaShare {
		t.Errorf("payrouter_memstore_key_limit_bytes = %.0f, want %d", share, quotaShare)
	}
	// A's charges fill its share but the sixteenth kept for keys; B holds a little of its own.
	if held, _ := sc.value("payrouter_memstore_bytes"); held > 2*quotaShare || held < quotaShare*15/16 {
		t.Errorf("payrouter_memstore_bytes = %.0f, want A's full share and a little of B's: %d .. %d", held, quotaShare*15/16, 2*quotaShare)
	}
}

// largestBody is a charge's body with the largest metadata and description the API accepts
// (largestDecline's), paid with token, captured at once or only authorized.
func largestBody(token string, capture bool) []byte {
	var body map[string]any
	if err := json.Unmarshal(largestDeclineBody(), &body); err != nil {
		panic(err)
	}
	body["payment_method"] = map[string]string{"type": "card", "token": token}
	body["capture"] = capture
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return b
}
