package pgstore

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// TestRowSizes measures what a charge costs the database, for docs/limits.md's sizing: charges
// with a typical body and with the largest metadata the API accepts (20 pairs of a 40-character
// key and a 500-character value, random letters so that compression does not flatter them), each
// with its idempotency key holding a 402 answer as CompleteCharge stores it. It reports the
// bytes per row of each table, indexes and TOAST included, and fails when they outgrow what
// docs/limits.md tells operators to plan for. Run it with -v to see the figures:
//
//	go test -run TestRowSizes -v ./pgstore/
func TestRowSizes(t *testing.T) {
	const n = 1000
	for _, tc := range []struct {
		name      string
		metadata  func() map[string]string
		maxCharge int64 // bytes a charge row (with its indexes) may take, as the docs say
		maxKey    int64
	}{
		{"typical", func() map[string]string { return map[string]string{"order": rand.Text()[:8], "cart": rand.Text()[:12]} }, 2 << 10, 2 << 10},
		{"largest metadata", func() map[string]string {
			md := map[string]string{}
			for i := range 20 {
				k := fmt.Sprintf("key%02d", i) + rand.Text()[:26] + rand.Text()[:9]
				v := ""
				for len(v) < 500 {
					v += rand.Text()
				}
				md[k] = v[:500]
			}
			return md
		}, 24 << 10, 2 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, pgtest.NewDatabase(t), Options{Timeout: 10 * time.Second, Retention: Retention{Every: -1}}) // a loaded test machine, not an outage
			ctx := t.Context()
			body := []byte(`{"type":"/problems/card-declined","title":"The card was declined","status":402,"detail":"the issuer declined the card (generic_decline)","charge_id":"ch_XXXXXXXXXXXXXXXXXXXXXXXXXX","gateway":"paywell","decline_code":"generic_decline","attempts":[{"gateway":"paywell","outcome":"declined","duration_ms":12}]}`)
			for i := range n {
				key := fmt.Sprintf("0123456789abcdef:order-%d-%s", i, rand.Text())
				_, h, err := s.Claim(ctx, "", key, "fp", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				c := &payrouter.Charge{
					ID: "ch_" + rand.Text(), Status: payrouter.StatusDeclined, Amount: 1999, Currency: "USD",
					CustomerID: "cus_" + rand.Text()[:14], Description: "order " + rand.Text(), Metadata: tc.metadata(),
					Capture: true, Route: "default", Gateway: "paywell", Reference: "pr_" + rand.Text(), DeclineCode: "generic_decline",
					Attempts:  []payrouter.Attempt{{Gateway: "paywell", Outcome: payrouter.OutcomeDeclined, Duration: 12 * time.Millisecond, Reference: "pr_" + rand.Text()}},
					CreatedAt: time.Now(), UpdatedAt: time.Now(),
				}
				rec := payrouter.IdempotencyRecord{Fingerprint: rand.Text() + rand.Text(), Status: 402,
					Header: map[string]string{"Content-Type": "application/problem+json"}, Body: body, CreatedAt: time.Now()}
				if err := s.CompleteCharge(ctx, c, h, rec, 24*time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE charges, idempotency_keys"); err != nil {
				t.Fatal(err)
			}
			per := func(table string) int64 {
				var size int64
				if err := s.pool.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", table).Scan(&size); err != nil {
					t.Fatal(err)
				}
				return size / n
			}
			charge, key := per("charges"), per("idempotency_keys")
			t.Logf("%s: %d charges: %d bytes a charge row, %d bytes an idempotency key row (indexes and TOAST included)", tc.name, n, charge, key)
			if charge > tc.maxCharge || key > tc.maxKey {
				t.Errorf("rows outgrew docs/limits.md's sizing: charge %d bytes (plan: %d), key %d bytes (plan: %d)", charge, tc.maxCharge, key, tc.maxKey)
			}
		})
	}
}
