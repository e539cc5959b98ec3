package payrouter

import (
	"reflect"
	"slices"
	"strings"
	"testing"
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
