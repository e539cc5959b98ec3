package routing

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// linearFirst is the matcher the index replaced: the first route, in order, whose Match fits.
// The index must answer as it does for every charge.
func linearFirst(routes []Route, amount int64, currency, country string) int {
	for i, rt := range routes {
		if rt.Match.Matches(amount, currency, country) {
			return i
		}
	}
	return -1
}

func TestRouteIndexFirstMatch(t *testing.T) {
	usd, eur := []string{"USD"}, []string{"EUR"}
	my, sg := []string{"MY"}, []string{"SG"}
	tests := []struct {
		name   string
		routes []Match
		charge matchCase
		want   int
	}{
		{"no routes", nil, mc(1, "USD", "MY"), -1},
		{"wildcard only", []Match{{}}, mc(1, "USD", "MY"), 0},
		{"wildcard before a specific route wins", []Match{{}, {Currency: usd, Country: my}}, mc(1, "USD", "MY"), 0},
		{"specific before a wildcard wins", []Match{{Currency: usd, Country: my}, {}}, mc(1, "USD", "MY"), 0},
		{"currency only before both", []Match{{Currency: usd}, {Currency: usd, Country: my}}, mc(1, "USD", "MY"), 0},
		{"country only before currency only", []Match{{Country: my}, {Currency: usd}}, mc(1, "USD", "MY"), 0},
		{"currency only before country only", []Match{{Currency: usd}, {Country: my}}, mc(1, "USD", "MY"), 0},
		{"other currency passed", []Match{{Currency: eur}, {Country: my}}, mc(1, "USD", "MY"), 1},
		{"other country passed", []Match{{Country: sg}, {Currency: usd, Country: sg}, {Currency: usd}}, mc(1, "USD", "MY"), 2},
		{"amount out of bounds passed", []Match{{Currency: usd, MaxAmount: 10}, {Currency: usd, MinAmount: 11}}, mc(50, "USD", "MY"), 1},
		{"amount-only route is a wildcard", []Match{{Currency: eur}, {MinAmount: 100}, {}}, mc(100, "USD", "MY"), 1},
		{"amount-only route out of bounds", []Match{{MinAmount: 100}, {Country: my}}, mc(99, "USD", "MY"), 1},
		{"no country on the charge", []Match{{Country: my}, {Currency: usd}}, mc(1, "USD", ""), 1},
		{"a code listed twice", []Match{{Currency: []string{"USD", "USD"}, MaxAmount: 5}, {Currency: usd}}, mc(9, "USD", "MY"), 1},
		{"several codes", []Match{{Currency: []string{"EUR", "USD"}, Country: []string{"SG", "MY"}}}, mc(1, "USD", "MY"), 0},
		{"none matches", []Match{{Currency: eur}, {Country: sg}}, mc(1, "USD", "MY"), -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			routes := make([]Route, len(tc.routes))
			for i, m := range tc.routes {
				routes[i] = Route{Name: fmt.Sprint("r", i), Match: m}
			}
			c := tc.charge
			if got := indexRoutes(routes).first(routes, c.amount, c.currency, c.country); got != tc.want {
				t.Errorf("first = %d, want %d", got, tc.want)
			}
			if got := linearFirst(routes, c.amount, c.currency, c.country); got != tc.want {
				t.Errorf("the linear matcher says %d, want %d: the table is wrong", got, tc.want)
			}
		})
	}
}

// matchCase is a charge as a route sees it.
type matchCase struct {
	amount            int64
	currency, country string
}

func mc(amount int64, currency, country string) matchCase {
	return matchCase{amount, currency, country}
}

// TestRouteIndexAgreesWithLinear: over random route lists (each field of a Match set or not,
// lists of one to three codes from small alphabets, so that routes overlap a lot, amount bounds
// that cross) and random charges (codes no route names included), the index answers what the
// linear scan answers.
func TestRouteIndexAgreesWithLinear(t *testing.T) {
	rnd := rand.New(rand.NewPCG(21, 4))
	currencies := []string{"USD", "EUR", "MYR", "SGD"}
	countries := []string{"MY", "SG", "US", "DE"}
	codes := func(from []string) []string {
		if rnd.IntN(3) == 0 {
			return nil
		}
		out := make([]string, 1+rnd.IntN(3))
		for i := range out {
			out[i] = from[rnd.IntN(len(from))]
		}
		return out
	}
	bound := func() int64 {
		if rnd.IntN(2) == 0 {
			return 0
		}
		return int64(1 + rnd.IntN(1000))
	}
	for list := range 2000 {
		routes := make([]Route, rnd.IntN(30))
		for i := range routes {
			routes[i] = Route{Name: fmt.Sprint("r", i), Match: Match{Currency: codes(currencies), Country: codes(countries), MinAmount: bound(), MaxAmount: bound()}}
		}
		ix := indexRoutes(routes)
		for range 50 {
			amount := int64(rnd.IntN(1100))
			currency := append(currencies, "JPY")[rnd.IntN(len(currencies)+1)]
			country := append(countries, "", "JP")[rnd.IntN(len(countries)+2)]
			want := linearFirst(routes, amount, currency, country)
			if got := ix.first(routes, amount, currency, country); got != want {
				t.Fatalf("list %d: a charge of %d %s from %q: the index matched route %d, the linear scan %d\nroutes: %+v", list, amount, currency, country, got, want, routes)
			}
		}
	}
}

// BenchmarkRouteMatch is the cost of finding a charge's route with 1, 100 and 10,000 routes,
// the charge matching the last (the linear scan's worst case: every route before it names
// another country), by the index and by the linear scan it replaced, in one run:
//
//	go test -run '^$' -bench RouteMatch ./routing/
func BenchmarkRouteMatch(b *testing.B) {
	for _, n := range []int{1, 100, 10000} {
		routes := make([]Route, n)
		for i := range n - 1 {
			routes[i] = Route{Name: fmt.Sprint("r", i), Match: Match{Currency: []string{"USD"}, Country: []string{countryCode(i)}}, Gateways: []string{"paywell"}}
		}
		routes[n-1] = Route{Name: "last", Match: Match{Currency: []string{"USD"}}, Gateways: []string{"paywell"}}
		ix := indexRoutes(routes)
		for _, m := range []struct {
			name  string
			first func(routes []Route, amount int64, currency, country string) int
		}{{"index", ix.first}, {"linear", linearFirst}} {
			b.Run(fmt.Sprintf("%s/%droutes", m.name, n), func(b *testing.B) {
				for b.Loop() {
					if m.first(routes, 1999, "USD", "MY") != n-1 {
						b.Fatal("the last route must match")
					}
				}
			})
		}
	}
}

// BenchmarkCandidates is Router.Candidates, all a charge's routing costs before its first
// gateway call (the match and its gateways' order), with 1, 100 and 10,000 routes, the charge
// matching the last, as BenchmarkRouteMatch: the figure issue 21 measured before the index (62 ns,
// 2.6 µs and 274 µs).
//
//	go test -run '^$' -bench Candidates ./routing/
func BenchmarkCandidates(b *testing.B) {
	names := []string{"paywell", "ding", "tranglo"}
	var settings []resilience.GatewaySettings
	adapters := map[string]payrouter.Gateway{}
	for _, n := range names {
		settings = append(settings, resilience.GatewaySettings{Name: n, TimeoutSettings: resilience.TimeoutSettings{Timeout: time.Second}, BulkheadSettings: resilience.BulkheadSettings{MaxConcurrent: 4}})
		adapters[n] = &scripted{authorize: approved}
	}
	dom := resilience.NewDomains(settings, nil)
	b.Cleanup(dom.Close)
	for _, n := range []int{1, 100, 10000} {
		routes := make([]Route, n)
		for i := range n - 1 {
			routes[i] = Route{Name: fmt.Sprint("r", i), Match: Match{Currency: []string{"USD"}, Country: []string{countryCode(i)}}, Gateways: []string{"ding"}}
		}
		routes[n-1] = Route{Name: "last", Gateways: names}
		r, err := New(Config{Routes: routes, Gateways: adapters, Domains: dom, Budget: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		c := &payrouter.Charge{ID: "ch_bench", Amount: 1999, Currency: "USD", Country: "MY"}
		b.Run(fmt.Sprintf("%droutes", n), func(b *testing.B) {
			for b.Loop() {
				if route, _, err := r.Candidates(c); err != nil || route != "last" {
					b.Fatalf("route %q, %v; want last", route, err)
				}
			}
		})
	}
}

// countryCode is the i-th two-letter code from AA, AB, ... never MY (the benchmark's charge's).
func countryCode(i int) string {
	i %= 26 * 26
	c := string([]byte{byte('A' + i/26), byte('A' + i%26)})
	if c == "MY" {
		return "ZZ"
	}
	return c
}

// TestRouteIndexRebuiltOnUpdate: the index is the table's, so a reload that changes the routes
// matches the new ones at once, order and wildcards included, and a charge of a currency no
// route names any longer matches none.
func TestRouteIndexRebuiltOnUpdate(t *testing.T) {
	f := newFixture(t,
		Route{Name: "usd", Match: Match{Currency: []string{"USD"}}, Gateways: []string{"ding"}},
		Route{Name: "default", Gateways: []string{"paywell"}})
	if route, _, err := f.router.Candidates(newCharge()); err != nil || route != "usd" {
		t.Fatalf("before the reload: route %q, %v; want usd", route, err)
	}
	f.reload(t, []string{"paywell", "ding", "tranglo"}, []Route{
		{Name: "my", Match: Match{Country: []string{"MY"}}, Gateways: []string{"tranglo"}},
		{Name: "usd-my", Match: Match{Currency: []string{"USD"}, Country: []string{"MY"}}, Gateways: []string{"ding"}},
		{Name: "eur", Match: Match{Currency: []string{"EUR"}}, Gateways: []string{"paywell"}},
	})
	c := newCharge()
	c.Country = "MY"
	if route, got, err := f.router.Candidates(c); err != nil || route != "my" || !equal(got, []string{"tranglo"}) {
		t.Errorf("after the reload, a USD charge from MY: route %q %v, %v; want my [tranglo]", route, got, err)
	}
	c.Country = "SG"
	if route, _, err := f.router.Candidates(c); err == nil {
		t.Errorf("after the reload, a USD charge from SG matched route %q; no route takes it now", route)
	}
}
