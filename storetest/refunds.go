package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// newRefund returns a refund with every field set, so that a store losing any of them is
// caught; TestNewRefundSetsEveryField fails when a new field is not set.
func newRefund(id string, status payrouter.RefundStatus) *payrouter.Refund {
	return &payrouter.Refund{
		ID:               id,
		ChargeID:         "ch_refunded",
		Amount:           500,
		Currency:         "USD",
		Status:           status,
		Gateway:          "paywell",
		Owner:            "scope_shop_eu",
		Reference:        payrouter.RefundReference(id),
		GatewayReference: "re_P-1234",
		Detail:           "charge_already_refunded",
		CreatedAt:        base.Add(time.Minute),
		UpdatedAt:        base.Add(time.Minute + 250*time.Millisecond),
	}
}

// diffRefund describes how got differs from want, or returns "". Times are compared as instants,
// as for charges.
func diffRefund(got, want *payrouter.Refund) string {
	if got == nil {
		return "got no refund"
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		return fmt.Sprintf("CreatedAt = %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	if !got.UpdatedAt.Equal(want.UpdatedAt) {
		return fmt.Sprintf("UpdatedAt = %v, want %v", got.UpdatedAt, want.UpdatedAt)
	}
	g, w := *got, *want
	g.CreatedAt, w.CreatedAt = time.Time{}, time.Time{}
	g.UpdatedAt, w.UpdatedAt = time.Time{}, time.Time{}
	if !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("\n got %+v\nwant %+v", g, w)
	}
	return ""
}

// mustSaveRefund stores r as a new refund, or moved from status from.
func mustSaveRefund(t *testing.T, s payrouter.Store, r *payrouter.Refund, from ...payrouter.RefundStatus) {
	t.Helper()
	ch := payrouter.RefundChange{Refund: r}
	if len(from) > 0 {
		ch.From = from[0]
	}
	if err := s.ChangeRefund(t.Context(), ch); err != nil {
		t.Fatalf("ChangeRefund(%s from %q to %s): %v", r.ID, ch.From, r.Status, err)
	}
}

func testRefundSaveAndGet(t *testing.T, s payrouter.Store) {
	want := newRefund("re_1", payrouter.RefundQueued)
	mustSaveRefund(t, s, want)
	got, err := s.Refund(t.Context(), "re_1")
	if err != nil {
		t.Fatalf("Refund(re_1): %v", err)
	}
	if d := diffRefund(got, want); d != "" {
		t.Errorf("Refund(re_1) after SaveRefund: %s", d)
	}

	t.Run("replace", func(t *testing.T) {
		second := newRefund("re_1", payrouter.RefundSucceeded)
		second.Detail = ""
		second.UpdatedAt = second.UpdatedAt.Add(time.Second)
		mustSaveRefund(t, s, second, payrouter.RefundQueued)
		got, err := s.Refund(t.Context(), "re_1")
		if err != nil {
			t.Fatalf("Refund(re_1): %v", err)
		}
		if d := diffRefund(got, second); d != "" {
			t.Errorf("Refund(re_1) after replacing it: %s", d)
		}
	})

	t.Run("a move from a status it is not in writes nothing", func(t *testing.T) {
		for _, from := range []payrouter.RefundStatus{"", payrouter.RefundQueued, payrouter.RefundPending} {
			again := newRefund("re_1", payrouter.RefundFailed)
			err := s.ChangeRefund(t.Context(), payrouter.RefundChange{Refund: again, From: from})
			if !errors.Is(err, payrouter.ErrStale) {
				t.Errorf("ChangeRefund(re_1 from %q) of a succeeded refund = %v, want ErrStale", from, err)
			}
		}
		if got, _ := s.Refund(t.Context(), "re_1"); got == nil || got.Status != payrouter.RefundSucceeded {
			t.Errorf("Refund(re_1) after refused moves = %+v, want it succeeded still", got)
		}
	})

	t.Run("a returned refund is a copy", func(t *testing.T) {
		got.Status = payrouter.RefundFailed
		again, err := s.Refund(t.Context(), "re_1")
		if err != nil {
			t.Fatalf("Refund(re_1): %v", err)
		}
		if again.Status != payrouter.RefundSucceeded {
			t.Errorf("Refund(re_1).Status = %s after changing an earlier answer, want succeeded", again.Status)
		}
	})
}

func testRefundNotFound(t *testing.T, s payrouter.Store) {
	mustSaveRefund(t, s, newRefund("re_exists", payrouter.RefundPending))
	for _, id := range []string{"re_missing", ""} {
		r, err := s.Refund(t.Context(), id)
		if !errors.Is(err, payrouter.ErrNotFound) {
			t.Errorf("Refund(%q) = %+v, %v; want an error wrapping ErrNotFound", id, r, err)
		}
	}
}

func testRefundInvalid(t *testing.T, s payrouter.Store) {
	tests := []struct {
		name   string
		refund *payrouter.Refund
	}{
		{"nil refund", nil},
		{"empty id", &payrouter.Refund{ChargeID: "ch_1", Amount: 1, Currency: "USD", Status: payrouter.RefundQueued}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.ChangeRefund(t.Context(), payrouter.RefundChange{Refund: tc.refund}); err == nil {
				t.Error("ChangeRefund succeeded, want an error")
			}
		})
	}
}
