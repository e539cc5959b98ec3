package fallback_test

import (
	"fmt"
	"testing"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
)

// The policy table: every operation, under a configuration that sets nothing, one that sets
// everything to fail, and one that sets blanks (taken as unset, as config does).
func TestSettingsPolicy(t *testing.T) {
	everythingFails := fallback.Settings{Charge: fallback.Fail, Refund: fallback.Fail, Status: fallback.Fail}
	blanks := fallback.Settings{Charge: " ", Refund: "\t", Status: ""}
	want := map[payrouter.Operation][3]fallback.Policy{ // unset, everything fails, blanks
		payrouter.OpCharge:  {fallback.Fail, fallback.Fail, fallback.Fail},
		payrouter.OpCapture: {fallback.Fail, fallback.Fail, fallback.Fail},
		payrouter.OpVoid:    {fallback.Fail, fallback.Fail, fallback.Fail},
		payrouter.OpRefund:  {fallback.Queue, fallback.Fail, fallback.Queue},
		payrouter.OpStatus:  {fallback.Degrade, fallback.Fail, fallback.Degrade},
	}
	for op, w := range want {
		for i, s := range []fallback.Settings{{}, everythingFails, blanks} {
			if got := s.Policy(op); got != w[i] {
				t.Errorf("%s under %+v: %q, want %q", op, s, got, w[i])
			}
		}
		if got := fallback.Default(op); got != w[0] {
			t.Errorf("Default(%s) = %q, want %q", op, got, w[0])
		}
		if a := fallback.Allowed(op); len(a) == 0 || a[0] != w[0] {
			t.Errorf("Allowed(%s) = %v, want its default %q first", op, a, w[0])
		}
	}
	if got, want := (fallback.Settings{}).WithDefaults(), (fallback.Settings{Charge: fallback.Fail, Refund: fallback.Queue, Status: fallback.Degrade}); got != want {
		t.Errorf("WithDefaults = %+v, want %+v", got, want)
	}
}

func TestSettingsInvalid(t *testing.T) {
	cases := []struct {
		name string
		s    fallback.Settings
		want string
	}{
		{"defaults", fallback.Settings{}.WithDefaults(), "[]"},
		{"every choice that exists", fallback.Settings{Charge: fallback.Fail, Refund: fallback.Fail, Status: fallback.Fail}, "[]"},
		{"each out of its set, in key order", fallback.Settings{Charge: fallback.Queue, Refund: fallback.Degrade, Status: fallback.Queue},
			`[charge: must be fail, got "queue" refund: must be queue or fail, got "degrade" status: must be degrade or fail, got "queue"]`},
		{"an unknown word", fallback.Settings{Charge: fallback.Fail, Refund: "later", Status: fallback.Degrade},
			`[refund: must be queue or fail, got "later"]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, bad := range tc.s.Invalid() {
				got = append(got, fmt.Sprintf("%s: must be %s, got %q", bad.Key, bad.Want(), bad.Got))
			}
			if fmt.Sprint(got) != tc.want {
				t.Errorf("Invalid = %v, want %v", got, tc.want)
			}
		})
	}
}

// Allowed hands out a copy: a caller that changes it changes nothing of the table.
func TestAllowedIsACopy(t *testing.T) {
	a := fallback.Allowed(payrouter.OpRefund)
	a[0] = fallback.Degrade
	if got := fallback.Default(payrouter.OpRefund); got != fallback.Queue {
		t.Errorf("the refund's default became %q", got)
	}
}
