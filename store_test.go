package payrouter

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBreakerTripRules ties BreakerTripRules, Trips and the fields of BreakerRules together: each
// listed key is a field whose value alone makes the rules trip, and no other field does.
func TestBreakerTripRules(t *testing.T) {
	if (BreakerRules{}).Trips() {
		t.Error("the zero BreakerRules trips; every rule at 0 is off")
	}
	typ := reflect.TypeFor[BreakerRules]()
	var keys []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		keys = append(keys, key)
		var r BreakerRules
		v := reflect.ValueOf(&r).Elem().Field(i)
		switch v.Kind() {
		case reflect.Int, reflect.Int64:
			v.SetInt(1)
		case reflect.Float64:
			v.SetFloat(0.5)
		default:
			t.Fatalf("%s: a field of kind %s; teach this test its positive value", f.Name, v.Kind())
		}
		if rule := slices.Contains(BreakerTripRules, key); r.Trips() != rule {
			t.Errorf("%s (%s) alone: Trips() = %v, want %v (listed in BreakerTripRules: %v)", f.Name, key, r.Trips(), rule, rule)
		}
	}
	for _, key := range BreakerTripRules {
		if !slices.Contains(keys, key) {
			t.Errorf("BreakerTripRules lists %q, which is no key of BreakerRules (%q)", key, keys)
		}
	}
}

// TestBreakerRulesProblems: the one check of trip rules, which config and the shared stores make.
func TestBreakerRulesProblems(t *testing.T) {
	ok := BreakerRules{ConsecutiveFailures: 5, FailureRate: 0.5, MinRequests: 10, Window: time.Minute, Cooldown: 30 * time.Second}
	tests := []struct {
		name string
		edit func(r *BreakerRules)
		want []string
	}{
		{"valid", func(*BreakerRules) {}, nil},
		{"no window: counts kept until the state changes", func(r *BreakerRules) { r.Window = 0 }, nil},
		{"every rule off", func(r *BreakerRules) { r.ConsecutiveFailures, r.FailureRate, r.MinRequests = 0, 0, 0 }, nil},
		{"consecutive failures negative", func(r *BreakerRules) { r.ConsecutiveFailures = -1 },
			[]string{"consecutive_failures: must be >= 0 (0: off)"}},
		{"failures in window negative", func(r *BreakerRules) { r.FailuresInWindow = -2 },
			[]string{"failures_in_window: must be >= 0 (0: off)"}},
		{"rate above 1", func(r *BreakerRules) { r.FailureRate = 1.5 },
			[]string{"failure_rate: must be between 0 and 1 (0: off), got 1.5"}},
		{"rate negative", func(r *BreakerRules) { r.FailureRate = -0.1 },
			[]string{"failure_rate: must be between 0 and 1 (0: off), got -0.1"}},
		{"rate NaN", func(r *BreakerRules) { r.FailureRate = math.NaN() },
			[]string{"failure_rate: must be between 0 and 1 (0: off), got NaN"}},
		{"a rate without min requests", func(r *BreakerRules) { r.MinRequests = 0 },
			[]string{"min_requests: must be >= 1 when failure_rate is set"}},
		{"min requests negative without a rate", func(r *BreakerRules) { r.FailureRate, r.MinRequests = 0, -1 },
			[]string{"min_requests: must be >= 0"}},
		{"window negative", func(r *BreakerRules) { r.Window = -time.Second },
			[]string{"window: must be >= 0 (0: no rolling window)"}},
		{"no cooldown", func(r *BreakerRules) { r.Cooldown = 0 }, []string{"cooldown: must be > 0"}},
		{"every field wrong, in field order", func(r *BreakerRules) {
			*r = BreakerRules{ConsecutiveFailures: -1, FailuresInWindow: -1, FailureRate: 2, MinRequests: -1, Window: -1, Cooldown: -1}
		}, []string{
			"consecutive_failures: must be >= 0 (0: off)", "failures_in_window: must be >= 0 (0: off)",
			"failure_rate: must be between 0 and 1 (0: off), got 2", "min_requests: must be >= 1 when failure_rate is set",
			"window: must be >= 0 (0: no rolling window)", "cooldown: must be > 0",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			var got []string
			for _, p := range r.Problems() {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Problems() = %q, want %q", got, tc.want)
			}
			err := r.Validate()
			if (err == nil) != (len(tc.want) == 0) {
				t.Fatalf("Validate() = %v with problems %q", err, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Validate() = %v, want it to say %q", err, w)
				}
			}
		})
	}
}
