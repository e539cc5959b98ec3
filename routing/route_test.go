package routing

import (
	"slices"
	"testing"
	"time"
)

func TestRouteMembers(t *testing.T) {
	tests := []struct {
		name  string
		route Route
		want  []string
	}{
		{"gateways in order", Route{Gateways: []string{"ding", "paywell"}}, []string{"ding", "paywell"}},
		{"split in its order", Route{Split: []Weight{{"tranglo", 1}, {"ding", 5}}}, []string{"tranglo", "ding"}},
		{"none", Route{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.route.Members(); !slices.Equal(got, tc.want) {
				t.Errorf("Members() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMatchAll(t *testing.T) {
	if !(Match{}).All() {
		t.Error("the zero Match must select every charge")
	}
	for _, m := range []Match{{Currency: []string{"MYR"}}, {Country: []string{"MY"}}, {MinAmount: 1}, {MaxAmount: 5}} {
		if m.All() {
			t.Errorf("%+v.All() = true, want false", m)
		}
	}
}

func TestParseHedgeAfter(t *testing.T) {
	tests := []struct {
		in   string
		want HedgeAfter
		ok   bool
	}{
		{"800ms", HedgeAfter{Delay: 800 * time.Millisecond}, true},
		{"p95", HedgeAfter{P95: true}, true},
		{"0s", HedgeAfter{}, false},
		{"-1s", HedgeAfter{}, false},
		{"fast", HedgeAfter{}, false},
		{"", HedgeAfter{}, false},
	}
	for _, tc := range tests {
		got, err := ParseHedgeAfter(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseHedgeAfter(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("ParseHedgeAfter(%q).String() = %q, want it back", tc.in, got.String())
		}
	}
}
