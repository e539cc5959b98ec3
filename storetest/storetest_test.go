package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// TestDiffCharge makes sure the suite's comparison cannot pass a store that loses a field: every
// field of Charge must count, while what no store can keep (a time's location, nil against
// empty) must not.
func TestDiffCharge(t *testing.T) {
	want := newCharge("ch_1", payrouter.StatusSucceeded, base)

	t.Run("equal", func(t *testing.T) {
		got := newCharge("ch_1", payrouter.StatusSucceeded, base)
		got.CreatedAt = got.CreatedAt.In(time.FixedZone("MYT", 8*3600))
		got.UpdatedAt = got.UpdatedAt.Local()
		if d := diffCharge(got, want); d != "" {
			t.Fatalf("same charge, other time zones: %s", d)
		}
		a, b := newCharge("ch_2", payrouter.StatusSucceeded, base), newCharge("ch_2", payrouter.StatusSucceeded, base)
		a.Metadata, a.Attempts = nil, nil
		b.Metadata, b.Attempts = map[string]string{}, []payrouter.Attempt{}
		if d := diffCharge(a, b); d != "" {
			t.Fatalf("nil against empty: %s", d)
		}
	})

	typ := reflect.TypeFor[payrouter.Charge]()
	for i := range typ.NumField() {
		field := typ.Field(i)
		if field.Name == "Hold" || field.Name == "Stored" {
			continue // the writer's fence, never stored; the store's own version (testVersions)
		}
		t.Run(field.Name, func(t *testing.T) {
			got := newCharge("ch_1", payrouter.StatusSucceeded, base)
			v := reflect.ValueOf(got).Elem().Field(i)
			if v.IsZero() {
				t.Fatalf("newCharge leaves %s unset, so the suite cannot tell whether a store keeps it", field.Name)
			}
			v.SetZero()
			if d := diffCharge(got, want); d == "" {
				t.Fatalf("a charge with %s changed compares equal", field.Name)
			}
		})
	}
}

// TestDiffChargeAttempts: every field of an Attempt counts too, and newCharge sets each in one
// of its attempts (Sale, Hedge and Voided tell a hedged charge's settlement where the money is).
func TestDiffChargeAttempts(t *testing.T) {
	want := newCharge("ch_1", payrouter.StatusSucceeded, base)
	typ := reflect.TypeFor[payrouter.Attempt]()
	for i := range typ.NumField() {
		field := typ.Field(i)
		t.Run(field.Name, func(t *testing.T) {
			got := newCharge("ch_1", payrouter.StatusSucceeded, base)
			set := false
			for j := range got.Attempts {
				v := reflect.ValueOf(&got.Attempts[j]).Elem().Field(i)
				if !v.IsZero() {
					set = true
					v.SetZero()
				}
			}
			if !set {
				t.Fatalf("newCharge sets %s in none of its attempts, so the suite cannot tell whether a store keeps it", field.Name)
			}
			if d := diffCharge(got, want); d == "" {
				t.Fatalf("a charge with an attempt's %s changed compares equal", field.Name)
			}
		})
	}
}
