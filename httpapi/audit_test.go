package httpapi

import (
	"crypto/sha256"
	"strings"
	"testing"
)

// Every money-moving and admin action writes one audit line naming who did what to which
// charge from where, and how it ended; a replay says it is one; nothing else is audited.
func TestAuditLines(t *testing.T) {
	st := newStack(t, "admin-token")
	id := st.newCharge(t, "audit-auth", false)
	st.post("/charge/"+id+"/capture", "audit-capture", "", "X-Request-Id", "req-capture-1")
	refund := st.post("/charge/"+id+"/refund", "audit-refund", `{"amount":100}`)
	refundID := decodeInto[refundReply](t, refund).ID
	declined := st.charge("audit-decline", `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_decline"}}`)
	st.charge("audit-decline", `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_decline"}}`)
	st.post("/charge/"+id+"/void", "audit-void", "", as("key-2")...)
	st.get("/charge/" + id) // a read: not audited
	admin := []string{"Authorization", "Bearer admin-token"}
	do(st.admin, "POST", "/admin/breakers/paywell/charge/force-open", "", admin...)
	do(st.admin, "POST", "/admin/breakers/paywell/charge/reset", "", admin...)
	do(st.admin, "POST", "/admin/breakers/paywell/charge/force-open", "", "Authorization", "Bearer wrong")

	declinedID := decodeInto[struct {
		ChargeID string `json:"charge_id"`
	}](t, declined).ChargeID
	key1, key2 := "key:"+digestScope(sha("key-1")), "key:"+digestScope(sha("key-2"))
	want := []map[string]any{
		{"action": "charge", "actor": key1, "charge_id": id, "status": 201.0, "result": "ok"},
		{"action": "capture", "actor": key1, "charge_id": id, "status": 200.0, "result": "ok", "request_id": "req-capture-1"},
		{"action": "refund", "actor": key1, "charge_id": id, "refund_id": refundID, "status": 201.0, "result": "ok"},
		{"action": "charge", "actor": key1, "charge_id": declinedID, "status": 402.0, "result": "card-declined"},
		{"action": "charge", "actor": key1, "charge_id": declinedID, "status": 402.0, "result": "card-declined", "replayed": true},
		{"action": "void", "actor": key2, "charge_id": id, "status": 404.0, "result": "not-found"},
		{"action": "breaker.force-open", "actor": "admin:admin", "breaker": "paywell/charge", "status": 200.0, "result": "ok"},
		{"action": "breaker.reset", "actor": "admin:admin", "breaker": "paywell/charge", "status": 200.0, "result": "ok"},
	}
	got := st.log.Named(t, "audit")
	if len(got) != len(want) {
		t.Fatalf("%d audit lines, want %d (a refused token is not an action):\n%s", len(got), len(want), st.log.String())
	}
	for i, w := range want {
		for k, v := range w {
			if got[i][k] != v {
				t.Errorf("audit line %d: %s = %v, want %v: %v", i, k, got[i][k], v, got[i])
			}
		}
		for _, k := range []string{"client_address", "request_id"} {
			if s, _ := got[i][k].(string); s == "" {
				t.Errorf("audit line %d has no %s: %v", i, k, got[i])
			}
		}
	}
	if strings.Contains(st.log.String(), "key-1") || strings.Contains(st.log.String(), "admin-token") {
		t.Error("a credential reached the log")
	}
}

func sha(key string) [32]byte { return sha256.Sum256([]byte(key)) }
