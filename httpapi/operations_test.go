package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/sim"
)

// post sends an operation on a charge with an Idempotency-Key; body "" is no body at all, sent
// without a Content-Type.
func (st *stack) post(path, key, body string, headers ...string) reply {
	return do(st.api, "POST", path, body, append([]string{"Authorization", "Bearer key-1", "Idempotency-Key", key}, headers...)...)
}

func (st *stack) get(path string) reply {
	return do(st.api, "GET", path, "", "Authorization", "Bearer key-1")
}

type chargeReply struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	AmountRefunded int64  `json:"amount_refunded"`
	Stale          bool   `json:"stale"`
}

type refundReply struct {
	ID       string `json:"id"`
	ChargeID string `json:"charge_id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
	Created  string `json:"created_at"`
}

func decodeInto[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		t.Fatalf("status %d: %v: %s", r.status, err, r.body)
	}
	return v
}

// newCharge makes a charge at paywell: captured, or authorized only.
func (st *stack) newCharge(t *testing.T, key string, capture bool) string {
	t.Helper()
	body := `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"capture":` + map[bool]string{true: "true", false: "false"}[capture] + `}`
	r := st.charge(key, body)
	want := map[bool]string{true: "succeeded", false: "requires_capture"}[capture]
	ch := decodeInto[chargeReply](t, r)
	if r.status != 201 || ch.Status != want {
		t.Fatalf("charge: %d %s, want 201 %s", r.status, r.body, want)
	}
	return ch.ID
}

func (st *stack) ledger(t *testing.T, gateway string) []sim.Tx {
	t.Helper()
	return st.sims[gateway].Ledger().Transactions()
}

func TestCaptureAndVoidRoutes(t *testing.T) {
	cases := []struct {
		name, op, body, contentType string
		wantStatus, wantLedger      string
	}{
		{"capture, no body", "capture", "", "", "succeeded", "captured"},
		{"capture, an empty object", "capture", `{}`, "application/json", "succeeded", "captured"},
		{"void, no body", "void", "", "", "voided", "voided"},
		{"void, an empty object", "void", ` {} `, "application/json; charset=utf-8", "voided", "voided"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := newStack(t, "admin-token")
			id := st.newCharge(t, "auth-1", false)
			var headers []string
			if tc.contentType != "" {
				headers = []string{"Content-Type", tc.contentType}
			}
			r := do(st.api, "POST", "/charge/"+id+"/"+tc.op, tc.body,
				append([]string{"Authorization", "Bearer key-1", "Idempotency-Key", tc.op + "-1"}, headers...)...)
			if ch := decodeInto[chargeReply](t, r); r.status != 200 || ch.ID != id || ch.Status != tc.wantStatus {
				t.Fatalf("%s: %d %s, want 200 %s", tc.op, r.status, r.body, tc.wantStatus)
			}
			if tx := st.ledger(t, "paywell"); len(tx) != 1 || string(tx[0].Status) != tc.wantLedger {
				t.Errorf("paywell's ledger %+v, want the charge %s", tx, tc.wantLedger)
			}
			calls := st.sims["paywell"].Stats().Requests
			again := do(st.api, "POST", "/charge/"+id+"/"+tc.op, tc.body,
				append([]string{"Authorization", "Bearer key-1", "Idempotency-Key", tc.op + "-1"}, headers...)...)
			if again.status != 200 || again.body != r.body || again.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("replay: %d replayed=%q %s", again.status, again.header.Get("Idempotent-Replayed"), again.body)
			}
			if n := st.sims["paywell"].Stats().Requests; n != calls {
				t.Errorf("a replay called paywell (%d requests, was %d)", n, calls)
			}
			if g := st.get("/charge/" + id); !strings.Contains(g.body, `"status":"`+tc.wantStatus+`"`) {
				t.Errorf("GET after %s: %s", tc.op, g.body)
			}
		})
	}
}

func TestOperationsOnTheWrongCharge(t *testing.T) {
	st := newStack(t, "admin-token")
	captured := st.newCharge(t, "captured-1", true)
	authorized := st.newCharge(t, "authorized-1", false)
	cases := []struct {
		name     string
		r        reply
		status   int
		wantType string
	}{
		{"capture an unknown charge", st.post("/charge/ch_nope/capture", "k1", ""), 404, "/problems/not-found"},
		{"void an unknown charge", st.post("/charge/ch_nope/void", "k2", ""), 404, "/problems/not-found"},
		{"refund an unknown charge", st.post("/charge/ch_nope/refund", "k3", ""), 404, "/problems/not-found"},
		{"an unknown refund", st.get("/refund/re_nope"), 404, "/problems/not-found"},
		{"capture a captured charge", st.post("/charge/"+captured+"/capture", "k4", ""), 409, "/problems/invalid-charge-state"},
		{"void a captured charge", st.post("/charge/"+captured+"/void", "k5", ""), 409, "/problems/invalid-charge-state"},
		{"refund an uncaptured charge", st.post("/charge/"+authorized+"/refund", "k6", ""), 409, "/problems/invalid-charge-state"},
		{"refund more than was charged", st.post("/charge/"+captured+"/refund", "k7", `{"amount":2000}`), 409, "/problems/invalid-charge-state"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.r.status != tc.status || problemType(t, tc.r) != tc.wantType {
				t.Errorf("got %d %s, want %d %s", tc.r.status, tc.r.body, tc.status, tc.wantType)
			}
		})
	}
	// 4xx answers are not kept for their key: the same key may be sent again.
	if again := st.post("/charge/"+captured+"/capture", "k4", ""); again.status != 409 || again.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("a 409 was replayed: %d %v", again.status, again.header)
	}
}

func TestOperationBodies(t *testing.T) {
	st := newStack(t, "admin-token")
	id := st.newCharge(t, "bodies-1", true)
	cases := []struct {
		name, op, body, contentType string
		status                      int
		field                       string
	}{
		{"amount as a string", "refund", `{"amount":"500"}`, "application/json", 400, "amount"},
		{"a fractional amount", "refund", `{"amount":1.5}`, "application/json", 400, "amount"},
		{"a zero amount", "refund", `{"amount":0}`, "application/json", 400, "amount"},
		{"a negative amount", "refund", `{"amount":-5}`, "application/json", 400, "amount"},
		{"an amount over 10^12", "refund", `{"amount":1000000000001}`, "application/json", 400, "amount"},
		{"an unknown field", "refund", `{"amount":5,"reason":"x"}`, "application/json", 400, "reason"},
		{"a duplicate key", "refund", `{"amount":5,"amount":6}`, "application/json", 400, "amount"},
		{"trailing data", "refund", `{"amount":5}{}`, "application/json", 400, "(body)"},
		{"not an object", "refund", `[5]`, "application/json", 400, "(body)"},
		{"not JSON", "refund", `amount=5`, "application/json", 400, "(body)"},
		{"a member in a capture", "capture", `{"amount":5}`, "application/json", 400, "amount"},
		{"a member in a void", "void", `{"force":true}`, "application/json", 400, "force"},
		{"a body that is not JSON", "capture", `{}`, "text/plain", 415, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(st.api, "POST", "/charge/"+id+"/"+tc.op, tc.body,
				"Authorization", "Bearer key-1", "Idempotency-Key", "body-"+tc.name, "Content-Type", tc.contentType)
			if r.status != tc.status {
				t.Fatalf("got %d %s, want %d", r.status, r.body, tc.status)
			}
			if tc.field == "" {
				return
			}
			var p struct{ Errors []fieldError }
			_ = json.Unmarshal([]byte(r.body), &p)
			if problemType(t, r) != "/problems/invalid-request" || len(p.Errors) == 0 || p.Errors[0].Field != tc.field {
				t.Errorf("got %s, want an error on %s", r.body, tc.field)
			}
		})
	}
	if r := do(st.api, "POST", "/charge/"+id+"/refund", "", "Authorization", "Bearer key-1"); r.status != 400 || !strings.Contains(r.body, "Idempotency-Key") {
		t.Errorf("no Idempotency-Key: %d %s", r.status, r.body)
	}
	if n := st.sims["paywell"].Stats().Requests; n != 1 {
		t.Errorf("paywell saw %d requests; a refused body must reach no gateway", n)
	}
}

func TestRefundRoutes(t *testing.T) {
	st := newStack(t, "admin-token")
	id := st.newCharge(t, "refunds-1", true)

	part := st.post("/charge/"+id+"/refund", "refund-part", `{"amount":500}`, "Content-Type", "application/json")
	rf := decodeInto[refundReply](t, part)
	if part.status != 201 || rf.Status != "succeeded" || rf.Amount != 500 || rf.ChargeID != id || rf.Currency != "USD" ||
		!strings.HasPrefix(rf.ID, "re_") || rf.Created == "" {
		t.Fatalf("partial refund: %d %s", part.status, part.body)
	}
	if g := st.get("/refund/" + rf.ID); g.status != 200 || decodeInto[refundReply](t, g) != rf {
		t.Errorf("GET /refund/%s: %d %s", rf.ID, g.status, g.body)
	}
	if ch := decodeInto[chargeReply](t, st.get("/charge/"+id)); ch.Status != "partially_refunded" || ch.AmountRefunded != 500 {
		t.Errorf("charge after a partial refund: %+v, want partially_refunded with 500 refunded", ch)
	}

	// The same key with another amount is another request.
	if r := st.post("/charge/"+id+"/refund", "refund-part", `{"amount":600}`, "Content-Type", "application/json"); r.status != 422 {
		t.Errorf("same key, another amount: %d %s, want 422", r.status, r.body)
	}
	// And the same key on another charge too: the charge is part of the request.
	other := st.newCharge(t, "refunds-2", true)
	if r := st.post("/charge/"+other+"/refund", "refund-part", `{"amount":500}`, "Content-Type", "application/json"); r.status != 422 {
		t.Errorf("same key and body, another charge: %d %s, want 422", r.status, r.body)
	}

	rest := st.post("/charge/"+id+"/refund", "refund-rest", "")
	if r := decodeInto[refundReply](t, rest); rest.status != 201 || r.Amount != 1499 || r.Status != "succeeded" {
		t.Fatalf("refund of the rest: %d %s, want 1499", rest.status, rest.body)
	}
	again := st.post("/charge/"+id+"/refund", "refund-rest", "")
	if again.status != 201 || again.body != rest.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replayed refund: %d replayed=%q %s", again.status, again.header.Get("Idempotent-Replayed"), again.body)
	}
	if ch := decodeInto[chargeReply](t, st.get("/charge/"+id)); ch.Status != "refunded" || ch.AmountRefunded != 1999 {
		t.Errorf("charge refunded in full: %+v", ch)
	}
	found := 0
	for _, tx := range st.ledger(t, "paywell") {
		if strings.HasPrefix(tx.Reference, id) {
			found++
			if tx.Status != sim.StatusRefunded || tx.Refunded != 1999 {
				t.Errorf("paywell's ledger: %+v, want 1999 refunded once", tx)
			}
		}
	}
	if found != 1 {
		t.Errorf("paywell's ledger holds %d transactions of the charge, want 1", found)
	}
}

func TestRefundQueuedWhileTheGatewayIsDown(t *testing.T) {
	st := newStack(t, "admin-token")
	id := st.newCharge(t, "queued-1", true)
	st.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})

	r := st.post("/charge/"+id+"/refund", "queued-refund", `{"amount":700}`, "Content-Type", "application/json")
	rf := decodeInto[refundReply](t, r)
	if r.status != 202 || rf.Status != "queued" || r.header.Get("Location") != "/refund/"+rf.ID {
		t.Fatalf("refund while paywell is unavailable: %d %v %s, want 202 queued", r.status, r.header, r.body)
	}
	if again := st.post("/charge/"+id+"/refund", "queued-refund", `{"amount":700}`, "Content-Type", "application/json"); again.status != 202 ||
		again.header.Get("Idempotent-Replayed") != "true" || again.header.Get("Location") != r.header.Get("Location") {
		t.Errorf("replay of a 202: %d %v", again.status, again.header)
	}
	if g := decodeInto[refundReply](t, st.get("/refund/"+rf.ID)); g.Status != "queued" {
		t.Errorf("GET /refund while queued: %+v", g)
	}

	// The gateway is back: the queue worker sends it.
	st.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeNormal})
	// Two tasks: the one queued before sending (due once the request is over, in case the
	// process dies before storing the answer) and the one the fallback queued (due now). Either
	// sends it; the other finds it done.
	tasks := st.store.Tasks()
	if len(tasks) != 2 {
		t.Fatalf("queued tasks %+v; want the refund's two", tasks)
	}
	for _, task := range tasks {
		if task.Kind != payrouter.TaskRefund || task.RefundID != rf.ID {
			t.Fatalf("queued task %+v; want the refund %s", task, rf.ID)
		}
		if task.NotBefore.IsZero() {
			if err := st.payments.Handlers()[task.Kind](t.Context(), task); err != nil {
				t.Fatalf("worked the refund: %v", err)
			}
		}
	}
	if g := decodeInto[refundReply](t, st.get("/refund/"+rf.ID)); g.Status != "succeeded" {
		t.Errorf("GET /refund after the worker sent it: %+v", g)
	}
	if ch := decodeInto[chargeReply](t, st.get("/charge/"+id)); ch.AmountRefunded != 700 {
		t.Errorf("charge after the queued refund: %+v", ch)
	}
	m := do(st.admin, "GET", "/metrics", "")
	if want := `payrouter_fallbacks_total{fallback="queue",operation="refund"} 1`; !strings.Contains(m.body, want) {
		t.Errorf("metrics lack %s", want)
	}
}

func TestCaptureUnavailableIsNotStored(t *testing.T) {
	st := newStack(t, "admin-token")
	id := st.newCharge(t, "later-1", false)
	st.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
	r := st.post("/charge/"+id+"/capture", "capture-later", "")
	var p struct {
		ChargeID string        `json:"charge_id"`
		Attempts []attemptView `json:"attempts"`
	}
	_ = json.Unmarshal([]byte(r.body), &p)
	if r.status != 503 || problemType(t, r) != "/problems/gateways-unavailable" || r.header.Get("Retry-After") == "" ||
		len(p.Attempts) != 1 || p.Attempts[0].Outcome != payrouter.OutcomeUnavailable || p.ChargeID != id {
		t.Fatalf("capture while paywell is unavailable: %d %v %s", r.status, r.header, r.body)
	}
	st.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeNormal})
	again := st.post("/charge/"+id+"/capture", "capture-later", "")
	if again.status != 200 || again.header.Get("Idempotent-Replayed") != "" || !strings.Contains(again.body, `"status":"succeeded"`) {
		t.Errorf("the same key after the 503: %d replayed=%q %s; want a fresh 200", again.status, again.header.Get("Idempotent-Replayed"), again.body)
	}
}

func TestGetChargeWhileProcessing(t *testing.T) {
	st := newStack(t, "admin-token")
	st.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeNormal, Latency: 2 * time.Second})
	r := st.charge("slow-get", `{"amount":1700,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`)
	ch := decodeInto[chargeReply](t, r)
	if r.status != 202 || ch.Status != "processing" {
		t.Fatalf("slow charge: %d %s", r.status, r.body)
	}

	st.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
	g := st.get("/charge/" + ch.ID)
	if got := decodeInto[chargeReply](t, g); g.status != 200 || got.Status != "processing" || !got.Stale {
		t.Errorf("GET while paywell cannot be asked: %d %s, want the stored charge marked stale", g.status, g.body)
	}
	m := do(st.admin, "GET", "/metrics", "")
	if want := `payrouter_fallbacks_total{fallback="degrade",operation="status"} 1`; !strings.Contains(m.body, want) {
		t.Errorf("metrics lack %s", want)
	}

	// Once paywell answers, the charge is what it says: the slow charge went through.
	st.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeNormal})
	g = st.get("/charge/" + ch.ID)
	if got := decodeInto[chargeReply](t, g); g.status != 200 || got.Status != "succeeded" || got.Stale || strings.Contains(g.body, "stale") {
		t.Errorf("GET once paywell answers: %d %s, want succeeded, not stale", g.status, g.body)
	}
	stored, err := st.store.Charge(t.Context(), ch.ID)
	if err != nil || stored.Status != payrouter.StatusSucceeded {
		t.Errorf("stored charge %+v, %v; want the resolution stored", stored, err)
	}
}

func TestAdminCharges(t *testing.T) {
	st := newStack(t, "admin-token")
	auth := []string{"Authorization", "Bearer admin-token"}
	first := st.newCharge(t, "admin-1", true)
	second := st.newCharge(t, "admin-2", true)
	st.newCharge(t, "admin-3", false)

	r := do(st.admin, "GET", "/admin/charges?status=succeeded", "", auth...)
	var list struct{ Charges []chargeReply }
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || r.status != 200 || len(list.Charges) != 2 {
		t.Fatalf("succeeded charges: %d %s", r.status, r.body)
	}
	if got := []string{list.Charges[0].ID, list.Charges[1].ID}; !(got[0] == first && got[1] == second) {
		t.Errorf("listed %v, want oldest first %v", got, []string{first, second})
	}
	r = do(st.admin, "GET", "/admin/charges?status=succeeded&limit=1", "", auth...)
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || len(list.Charges) != 1 {
		t.Errorf("limit 1: %s", r.body)
	}
	r = do(st.admin, "GET", "/admin/charges?status=processing", "", auth...)
	if r.status != 200 || r.body != `{"charges":[]}`+"\n" {
		t.Errorf("no processing charge: %d %q", r.status, r.body)
	}
	for _, q := range []string{"", "?status=pending", "?status=succeeded&limit=0", "?status=succeeded&limit=1001", "?status=succeeded&limit=ten"} {
		if r := do(st.admin, "GET", "/admin/charges"+q, "", auth...); r.status != 400 || problemType(t, r) != "/problems/invalid-request" {
			t.Errorf("GET /admin/charges%s: %d %s, want 400", q, r.status, r.body)
		}
	}
	if r := do(st.admin, "GET", "/admin/charges?status=succeeded", ""); r.status != 401 {
		t.Errorf("without the admin token: %d", r.status)
	}
}

func TestChargeViewShowsRefundsHedgesAndVoids(t *testing.T) {
	ch := &payrouter.Charge{ID: "ch_1", Status: payrouter.StatusSucceeded, Amount: 1999, Refunded: 500, Attempts: []payrouter.Attempt{
		{Gateway: "paywell", Outcome: payrouter.OutcomeSucceeded, Voided: true},
		{Gateway: "ding", Outcome: payrouter.OutcomeSucceeded, Hedge: true},
		{Gateway: "tranglo", Outcome: payrouter.OutcomeUnavailable},
	}}
	b, _ := json.Marshal(viewOf(ch))
	for _, want := range []string{`"amount_refunded":500`, `{"gateway":"paywell","outcome":"succeeded","duration_ms":0,"voided":true}`,
		`{"gateway":"ding","outcome":"succeeded","duration_ms":0,"hedge":true}`, `{"gateway":"tranglo","outcome":"unavailable","duration_ms":0}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("charge object %s lacks %s", b, want)
		}
	}
	if strings.Contains(string(b), "stale") {
		t.Errorf("a fresh charge object says stale: %s", b)
	}
	ch.Refunded = 0
	if b, _ := json.Marshal(viewOf(ch)); strings.Contains(string(b), "amount_refunded") {
		t.Errorf("nothing refunded, yet %s", b)
	}
}
