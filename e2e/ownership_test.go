package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// TestAnotherKeySeesNothing: a second API key reads and acts on the first key's charges and
// refunds through every endpoint, on the in-memory store and on PostgreSQL. Every answer is the
// 404 an id that does not exist gets, and the gateway's ledger does not move.
func TestAnotherKeySeesNothing(t *testing.T) {
	skipIfShort(t)
	for _, store := range []string{"memory", "postgresql"} {
		t.Run(store, func(t *testing.T) {
			s := startSims(t)
			gw := gatewayConfig{Timeout: 2 * time.Second, MaxConcurrent: 10, ConsecutiveFailures: 50, Cooldown: 30 * time.Second}
			cfg := routerConfig{
				RequestTimeout: 3 * time.Second,
				Gateways:       map[string]gatewayConfig{"paywell": gw},
				Routes:         []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell"}}},
			}
			if store == "postgresql" {
				cfg.DatabaseURL = pgtest.NewDatabase(t)
			}
			in := startPayrouter(t, s, cfg)

			as := func(key, method, path, idemKey string, body []byte) reply {
				t.Helper()
				h := []string{"Authorization", "Bearer " + key}
				if idemKey != "" {
					h = append(h, "Idempotency-Key", idemKey)
				}
				if body != nil {
					h = append(h, "Content-Type", "application/json")
				}
				r, err := send(in.client, method, in.url+path, body, h...)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			charge := func(key string, capture bool) string {
				t.Helper()
				body := []byte(`{"amount":5000,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"capture":` +
					map[bool]string{true: "true", false: "false"}[capture] + `,"customer_id":"cus_owner","metadata":{"order":"42"}}`)
				r := as(apiKey, "POST", "/charge", key, body)
				var ch struct{ ID string }
				if r.status != 201 || json.Unmarshal(r.body, &ch) != nil {
					t.Fatalf("charge by its owner: %s", r)
				}
				return ch.ID
			}
			captured, authorized := charge("own-captured", true), charge("own-authorized", false)
			rf := as(apiKey, "POST", "/charge/"+captured+"/refund", "own-refund", []byte(`{"amount":1000}`))
			var refund struct{ ID string }
			if rf.status != 201 || json.Unmarshal(rf.body, &refund) != nil {
				t.Fatalf("refund by its owner: %s", rf)
			}
			before := s.paywell.ledger(t)

			missingCharge := "ch_" + strings.Repeat("Z", len(captured)-3)
			missingRefund := "re_" + strings.Repeat("Z", len(refund.ID)-3)
			for _, tc := range []struct {
				what, method, path, unknownPath string
				body                            []byte
			}{
				{"read the charge", "GET", "/charge/" + captured, "/charge/" + missingCharge, nil},
				{"refund", "POST", "/charge/" + captured + "/refund", "/charge/" + missingCharge + "/refund", []byte(`{"amount":4000}`)},
				{"capture", "POST", "/charge/" + authorized + "/capture", "/charge/" + missingCharge + "/capture", nil},
				{"void", "POST", "/charge/" + authorized + "/void", "/charge/" + missingCharge + "/void", nil},
				{"read the refund", "GET", "/refund/" + refund.ID, "/refund/" + missingRefund, nil},
			} {
				key := ""
				if tc.method == "POST" {
					key = "stranger-" + tc.what
				}
				got := as(otherAPIKey, tc.method, tc.path, key, tc.body)
				unknown := as(otherAPIKey, tc.method, tc.unknownPath, key+"-unknown", tc.body)
				id := strings.Split(strings.TrimPrefix(strings.TrimPrefix(tc.path, "/charge/"), "/refund/"), "/")[0]
				unknownID := strings.Split(strings.TrimPrefix(strings.TrimPrefix(tc.unknownPath, "/charge/"), "/refund/"), "/")[0]
				if got.status != http.StatusNotFound {
					t.Errorf("another key may %s: %s", tc.what, got)
					continue
				}
				if !bytes.Equal(bytes.ReplaceAll(got.body, []byte(id), []byte(unknownID)), unknown.body) {
					t.Errorf("%s: another key's id is answered %s, an unknown one %s", tc.what, got.body, unknown.body)
				}
				for _, secret := range []string{"cus_owner", `"order"`, "5000"} {
					if bytes.Contains(got.body, []byte(secret)) {
						t.Errorf("%s: the 404 shows %s of the other key's charge: %s", tc.what, secret, got.body)
					}
				}
			}
			if after := s.paywell.ledger(t); !reflect.DeepEqual(after, before) {
				t.Errorf("the gateway's ledger moved under another key:\nbefore %+v\nafter  %+v", before, after)
			}
			// The owner is not hindered: it captures what the stranger could not.
			if r := as(apiKey, "POST", "/charge/"+authorized+"/capture", "own-capture", nil); r.status != 200 {
				t.Errorf("capture by the owner: %s", r)
			}
			if r := as(apiKey, "GET", "/refund/"+refund.ID, "", nil); r.status != 200 {
				t.Errorf("the owner reads its refund: %s", r)
			}
		})
	}
}
