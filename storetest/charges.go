package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// base is the creation time of the test charges. Whole seconds, so that a store keeping
// CreatedAt at millisecond precision (a Redis sorted-set score) orders them the same.
var base = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// newCharge returns a charge with every field set, fresh maps and slices included, so that each
// call gives an independent value. Every field, coherent or not (a decline code on a success),
// so that a store losing any of them is caught; TestDiffCharge fails when a new field is not set.
func newCharge(id string, status payrouter.ChargeStatus, created time.Time) *payrouter.Charge {
	return &payrouter.Charge{
		ID:               id,
		Status:           status,
		Amount:           1999,
		Currency:         "USD",
		Country:          "MY",
		CustomerID:       "cus_123",
		Description:      "order 42",
		Metadata:         map[string]string{"order": "42", "channel": "web"},
		PaymentMethod:    payrouter.PaymentMethod{Type: "card", Token: "tok_visa"},
		Capture:          true,
		CaptureQueued:    true,
		PinnedGateway:    "paywell",
		Route:            "default",
		Owner:            "scope_shop_eu",
		Gateway:          "ding",
		GatewayReference: "D-778812",
		Reference:        payrouter.AttemptReference(id, 2),
		DeclineCode:      "do_not_honor",
		Refunded:         500,
		RefundsReserved:  200,
		Changing:         payrouter.OpCapture,
		ChangingSince:    created.Add(100 * time.Millisecond),
		Attempts: []payrouter.Attempt{
			{Gateway: "paywell", Outcome: payrouter.OutcomeTimeout, Duration: 3 * time.Second,
				Reference: payrouter.AttemptReference(id, 1), Resolved: payrouter.TxNotFound, Sale: true, Voided: true},
			{Gateway: "ding", Outcome: payrouter.OutcomeSucceeded, Duration: 212 * time.Millisecond,
				Reference: payrouter.AttemptReference(id, 2), Hedge: true},
		},
		CreatedAt: created,
		UpdatedAt: created.Add(250 * time.Millisecond),
	}
}

// keptForm is what a store gives back for c: its JSON form, which is how the stores keep charges
// (payrouter.Charge), so the payment method, tagged out of it, is not kept.
func keptForm(t *testing.T, c *payrouter.Charge) *payrouter.Charge {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatalf("encoding charge %s: %v", c.ID, err)
	}
	var kept payrouter.Charge
	if err := json.Unmarshal(b, &kept); err != nil {
		t.Fatalf("decoding charge %s: %v", c.ID, err)
	}
	return &kept
}

// diffCharge describes how got differs from want, or returns "". Times are compared as instants
// and nil as empty, since a store that serialises charges cannot keep a time's location or tell
// a nil map from an empty one, and neither matters to payrouter.
func diffCharge(got, want *payrouter.Charge) string {
	if got == nil || want == nil {
		if got == want {
			return ""
		}
		return fmt.Sprintf("got %v, want %v", got, want)
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		return fmt.Sprintf("CreatedAt = %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	if !got.UpdatedAt.Equal(want.UpdatedAt) {
		return fmt.Sprintf("UpdatedAt = %v, want %v", got.UpdatedAt, want.UpdatedAt)
	}
	if !got.ChangingSince.Equal(want.ChangingSince) {
		return fmt.Sprintf("ChangingSince = %v, want %v", got.ChangingSince, want.ChangingSince)
	}
	g, w := *got, *want
	g.CreatedAt, w.CreatedAt = time.Time{}, time.Time{}
	g.UpdatedAt, w.UpdatedAt = time.Time{}, time.Time{}
	g.ChangingSince, w.ChangingSince = time.Time{}, time.Time{}
	// The version is the store's to set (testVersions checks it).
	g.Stored, w.Stored = payrouter.Stored{}, payrouter.Stored{}
	for _, c := range []*payrouter.Charge{&g, &w} {
		if len(c.Metadata) == 0 {
			c.Metadata = nil
		}
		if len(c.Attempts) == 0 {
			c.Attempts = nil
		}
	}
	if !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("\n got %+v\nwant %+v", g, w)
	}
	return ""
}

func mustSave(t *testing.T, s payrouter.Store, c *payrouter.Charge) {
	t.Helper()
	if err := s.SaveCharge(t.Context(), c); err != nil {
		t.Fatalf("SaveCharge(%s): %v", c.ID, err)
	}
}

func mustGet(t *testing.T, s payrouter.Store, id string) *payrouter.Charge {
	t.Helper()
	c, err := s.Charge(t.Context(), id)
	if err != nil {
		t.Fatalf("Charge(%s): %v", id, err)
	}
	return c
}

func chargeIDs(cs []*payrouter.Charge) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

func testSaveAndGet(t *testing.T, s payrouter.Store) {
	tests := []struct {
		name   string
		charge *payrouter.Charge
	}{
		{"every field set", newCharge("ch_full", payrouter.StatusSucceeded, base)},
		{"only the required fields", &payrouter.Charge{ID: "ch_bare", Status: payrouter.StatusProcessing,
			Amount: 1, Currency: "EUR", CreatedAt: base}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mustSave(t, s, tc.charge)
			if d := diffCharge(mustGet(t, s, tc.charge.ID), keptForm(t, tc.charge)); d != "" {
				t.Errorf("Charge(%s) after SaveCharge: %s", tc.charge.ID, d)
			}
		})
	}
}

func testReplace(t *testing.T, s payrouter.Store) {
	first := newCharge("ch_replace", payrouter.StatusProcessing, base)
	mustSave(t, s, first)

	second := newCharge("ch_replace", payrouter.StatusSucceeded, base)
	second.Attempts = append(second.Attempts, payrouter.Attempt{Gateway: "tranglo", Outcome: payrouter.OutcomeDeclined})
	second.Metadata = nil
	second.GatewayReference = "T-1"
	second.Stored = first.Stored // read back, as a writer does
	mustSave(t, s, second)

	if d := diffCharge(mustGet(t, s, "ch_replace"), keptForm(t, second)); d != "" {
		t.Errorf("Charge after replace: %s", d)
	}
	// The reconciler must stop seeing a charge once it is no longer processing.
	for status, want := range map[payrouter.ChargeStatus][]string{
		payrouter.StatusProcessing: {},
		payrouter.StatusSucceeded:  {"ch_replace"},
	} {
		got, err := s.ChargesByStatus(t.Context(), status, 10)
		if err != nil {
			t.Fatalf("ChargesByStatus(%s): %v", status, err)
		}
		if ids := chargeIDs(got); !slices.Equal(ids, want) {
			t.Errorf("ChargesByStatus(%s) after replace = %v, want %v", status, ids, want)
		}
	}
}

// testTokenNotKept: a store is no place for a payment token, which would then sit in every
// memory dump and Redis snapshot; the gateways have been called by the time a charge is saved.
func testTokenNotKept(t *testing.T, s payrouter.Store) {
	mustSave(t, s, newCharge("ch_token", payrouter.StatusSucceeded, base))
	if got := mustGet(t, s, "ch_token").PaymentMethod; got.Token != "" {
		t.Fatalf("stored charge keeps its payment token: %+v", got)
	}
}

func testChargeNotFound(t *testing.T, s payrouter.Store) {
	mustSave(t, s, newCharge("ch_exists", payrouter.StatusSucceeded, base))
	c, err := s.Charge(t.Context(), "ch_missing")
	if !errors.Is(err, payrouter.ErrNotFound) {
		t.Fatalf("Charge(ch_missing) = %v, %v; want an error wrapping ErrNotFound", c, err)
	}
}

func testSaveInvalid(t *testing.T, s payrouter.Store) {
	tests := []struct {
		name   string
		charge *payrouter.Charge
	}{
		{"nil charge", nil},
		{"empty id", &payrouter.Charge{Status: payrouter.StatusProcessing, CreatedAt: base}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.SaveCharge(t.Context(), tc.charge); err == nil {
				t.Error("SaveCharge succeeded, want an error")
			}
		})
	}
}

func testChargeIsolation(t *testing.T, s payrouter.Store) {
	mutations := []struct {
		name   string
		mutate func(c *payrouter.Charge)
	}{
		{"scalar field", func(c *payrouter.Charge) { c.Status = payrouter.StatusRefunded }},
		{"metadata value", func(c *payrouter.Charge) { c.Metadata["order"] = "changed" }},
		{"metadata key added", func(c *payrouter.Charge) { c.Metadata["extra"] = "x" }},
		{"attempt in place", func(c *payrouter.Charge) { c.Attempts[0].Outcome = payrouter.OutcomeDeclined }},
		{"attempt appended", func(c *payrouter.Charge) {
			// Append into spare capacity, where a shallow copy would share the new element.
			c.Attempts = append(c.Attempts[:1], payrouter.Attempt{Gateway: "tranglo"})
		}},
	}
	for i, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			id := fmt.Sprintf("ch_iso_%d", i)
			want := keptForm(t, newCharge(id, payrouter.StatusProcessing, base))

			saved := newCharge(id, payrouter.StatusProcessing, base)
			mustSave(t, s, saved)
			m.mutate(saved)
			if d := diffCharge(mustGet(t, s, id), want); d != "" {
				t.Fatalf("after changing the saved charge: %s", d)
			}

			m.mutate(mustGet(t, s, id))
			if d := diffCharge(mustGet(t, s, id), want); d != "" {
				t.Fatalf("after changing a charge Charge returned: %s", d)
			}

			listed, err := s.ChargesByStatus(t.Context(), payrouter.StatusProcessing, 100)
			if err != nil {
				t.Fatalf("ChargesByStatus: %v", err)
			}
			for _, c := range listed {
				m.mutate(c)
			}
			if d := diffCharge(mustGet(t, s, id), want); d != "" {
				t.Fatalf("after changing charges ChargesByStatus returned: %s", d)
			}
		})
	}
}

func testChargesByStatus(t *testing.T, s payrouter.Store) {
	// Saved out of order, with two charges created at the same instant, so that neither insertion
	// order nor map order can pass for the oldest-first order.
	for _, c := range []*payrouter.Charge{
		newCharge("ch_e", payrouter.StatusProcessing, base.Add(3*time.Second)),
		newCharge("ch_c", payrouter.StatusProcessing, base.Add(2*time.Second)),
		newCharge("ch_b", payrouter.StatusProcessing, base.Add(time.Second)),
		newCharge("ch_d", payrouter.StatusSucceeded, base),
		newCharge("ch_a", payrouter.StatusProcessing, base.Add(time.Second)),
	} {
		mustSave(t, s, c)
	}
	tests := []struct {
		name   string
		status payrouter.ChargeStatus
		limit  int
		want   []string
	}{
		{"oldest first, ties by id", payrouter.StatusProcessing, 10, []string{"ch_a", "ch_b", "ch_c", "ch_e"}},
		{"limit exactly reached", payrouter.StatusProcessing, 4, []string{"ch_a", "ch_b", "ch_c", "ch_e"}},
		{"limited", payrouter.StatusProcessing, 2, []string{"ch_a", "ch_b"}},
		{"limit one", payrouter.StatusProcessing, 1, []string{"ch_a"}},
		{"other status", payrouter.StatusSucceeded, 10, []string{"ch_d"}},
		{"status with no charges", payrouter.StatusDeclined, 10, nil},
		{"zero limit", payrouter.StatusProcessing, 0, nil},
		{"negative limit", payrouter.StatusProcessing, -1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.ChargesByStatus(t.Context(), tc.status, tc.limit)
			if err != nil {
				t.Fatalf("ChargesByStatus: %v", err)
			}
			if ids := chargeIDs(got); !slices.Equal(ids, tc.want) {
				t.Fatalf("ChargesByStatus(%s, %d) = %v, want %v", tc.status, tc.limit, ids, tc.want)
			}
			for _, c := range got {
				if d := diffCharge(c, mustGet(t, s, c.ID)); d != "" {
					t.Errorf("ChargesByStatus gave %s unlike Charge: %s", c.ID, d)
				}
			}
		})
	}
}

// testConcurrentCharges is for the race detector: writers and readers of the same and of
// different charges at once.
func testConcurrentCharges(t *testing.T, s payrouter.Store) {
	const workers, rounds = 8, 50
	ctx := t.Context()
	mustSave(t, s, newCharge("ch_shared", payrouter.StatusProcessing, base))
	errs := make(chan error, workers*rounds)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				own := newCharge(fmt.Sprintf("ch_w%d_%d", w, r), payrouter.StatusProcessing, base.Add(time.Duration(r)*time.Second))
				if err := s.SaveCharge(ctx, own); err != nil {
					errs <- err
					return
				}
				// One more attempt on the shared charge, read and written back until no other
				// writer came between: no write may be lost.
				for {
					shared, err := s.Charge(ctx, "ch_shared")
					if err != nil {
						errs <- err
						return
					}
					shared.Attempts = append(shared.Attempts, payrouter.Attempt{Gateway: fmt.Sprintf("w%d", w), Outcome: payrouter.OutcomeTimeout})
					err = s.SaveCharge(ctx, shared)
					if errors.Is(err, payrouter.ErrStale) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					break
				}
				if _, err := s.ChargesByStatus(ctx, payrouter.StatusProcessing, 5); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	shared := mustGet(t, s, "ch_shared")
	if got, want := len(shared.Attempts), 2+workers*rounds; got != want {
		t.Errorf("the shared charge has %d attempts after %d writes of one more each, want %d: writes were lost", got, workers*rounds, want)
	}
	if got, want := shared.Stored.Version, int64(1+workers*rounds); got != want {
		t.Errorf("the shared charge is at version %d, want %d", got, want)
	}
	all, err := s.ChargesByStatus(ctx, payrouter.StatusProcessing, workers*rounds+10)
	if err != nil {
		t.Fatalf("ChargesByStatus: %v", err)
	}
	if got, want := len(all), workers*rounds+1; got != want {
		t.Fatalf("ChargesByStatus found %d charges, want %d", got, want)
	}
}
