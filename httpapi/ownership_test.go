package httpapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// as sends a request with another API key: the Authorization given last wins.
func as(key string) []string { return []string{"Authorization", "Bearer " + key} }

// notFoundAs checks r is the 404 an id that does not exist gets, word for word once the id is
// swapped: a key must not learn that another key's charge exists.
func notFoundAs(t *testing.T, what string, r, unknown reply, id, unknownID string) {
	t.Helper()
	if r.status != 404 || problemType(t, r) != "/problems/not-found" {
		t.Errorf("%s with another key's id: %d %s, want 404 not-found", what, r.status, r.body)
		return
	}
	if strings.ReplaceAll(r.body, id, unknownID) != unknown.body {
		t.Errorf("%s: another key's id is answered\n  %s\nbut an id that does not exist\n  %s", what, r.body, unknown.body)
	}
}

// Every endpoint that reads or acts on a charge or refund answers another key's id as it answers
// an id that does not exist, and changes nothing at the gateway.
func TestAnotherKeysChargeIsNotFound(t *testing.T) {
	st := newStack(t, "admin-token")
	captured := st.newCharge(t, "own-captured", true)
	authorized := st.newCharge(t, "own-authorized", false)
	refund := st.post("/charge/"+captured+"/refund", "own-refund", `{"amount":500}`)
	if refund.status != 201 {
		t.Fatalf("refund by its own key: %d %s", refund.status, refund.body)
	}
	refundID := decodeInto[refundReply](t, refund).ID
	before := st.ledger(t, "paywell")

	// Ids of the same shape that no charge or refund has.
	missingCharge := "ch_" + strings.Repeat("0", len(captured)-3)
	missingRefund := "re_" + strings.Repeat("0", len(refundID)-3)
	cases := []struct {
		what      string
		send      func(id, key string) reply
		id, unset string
	}{
		{"GET /charge/{id}", func(id, _ string) reply {
			return do(st.api, "GET", "/charge/"+id, "", as("key-2")...)
		}, captured, missingCharge},
		{"capture", func(id, key string) reply {
			return st.post("/charge/"+id+"/capture", key, "", as("key-2")...)
		}, authorized, missingCharge},
		{"void", func(id, key string) reply {
			return st.post("/charge/"+id+"/void", key, "", as("key-2")...)
		}, authorized, missingCharge},
		{"refund", func(id, key string) reply {
			return st.post("/charge/"+id+"/refund", key, `{"amount":1000}`, as("key-2")...)
		}, captured, missingCharge},
		{"GET /refund/{id}", func(id, _ string) reply {
			return do(st.api, "GET", "/refund/"+id, "", as("key-2")...)
		}, refundID, missingRefund},
	}
	for _, tc := range cases {
		t.Run(tc.what, func(t *testing.T) {
			got := tc.send(tc.id, "stranger-"+tc.what)
			unknown := tc.send(tc.unset, "stranger-unknown-"+tc.what)
			notFoundAs(t, tc.what, got, unknown, tc.id, tc.unset)
			// Asked again with the same key, still 404: the refusal is not an answer stored
			// for the key, and it did not take the key either.
			if again := tc.send(tc.id, "stranger-"+tc.what); again.status != 404 {
				t.Errorf("asked again: %d %s", again.status, again.body)
			}
		})
	}

	after := st.ledger(t, "paywell")
	if len(after) != len(before) {
		t.Fatalf("the gateway's ledger changed: %d transactions, then %d", len(before), len(after))
	}
	for i := range after {
		if after[i] != before[i] {
			t.Errorf("another key changed a transaction at the gateway: %+v, now %+v", before[i], after[i])
		}
	}
	// And the owner still can do everything it could.
	for _, path := range []string{"/charge/" + captured, "/charge/" + authorized, "/refund/" + refundID} {
		if r := st.get(path); r.status != 200 {
			t.Errorf("GET %s by its own key: %d %s", path, r.status, r.body)
		}
	}
	if r := st.post("/charge/"+authorized+"/capture", "own-capture", ""); r.status != 200 {
		t.Errorf("capture by its own key: %d %s", r.status, r.body)
	}
}

// A charge stored before owners were recorded has none: every key may read and act on it until
// it expires, as when it was made (the README says so).
func TestChargeWithoutOwnerStaysOpen(t *testing.T) {
	st := newStack(t, "admin-token")
	id := st.newCharge(t, "legacy", false)
	ch, err := st.store.Charge(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Owner == "" {
		t.Fatal("a new charge records no owner")
	}
	ch.Owner = ""
	ch.UpdatedAt = time.Now()
	if err := st.store.SaveCharge(context.Background(), ch); err != nil {
		t.Fatal(err)
	}
	if r := do(st.api, "GET", "/charge/"+id, "", as("key-2")...); r.status != 200 {
		t.Errorf("GET of a charge with no owner by another key: %d %s", r.status, r.body)
	}
	if r := st.post("/charge/"+id+"/void", "legacy-void", "", as("key-2")...); r.status != 200 {
		t.Errorf("void of a charge with no owner by another key: %d %s", r.status, r.body)
	}
	if got, _ := st.store.Charge(context.Background(), id); got.Status != payrouter.StatusVoided {
		t.Errorf("status %s, want voided", got.Status)
	}
}
