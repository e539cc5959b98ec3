// Package routing picks the candidate gateways for a charge and runs its attempts through the
// resilience guards, over the table (routes, adapters, domains) the charge started with: ordered
// failover under the safety rules of docs/api.md (POST /charge), hedging, and the resolution of unknown outcomes
// by a status look-up at the gateway that may have charged. It writes no money state: what the
// attempts change is written by the Keeper the caller gives (payments.Service, which owns the rest
// of a charge's life), and it imports nothing above it. Call (call.go) is the one way anything
// calls a gateway; Apply (answer.go) the one reading of a gateway's answer into its charge.
package routing

import (
	"math/rand/v2"
	"slices"
)

// Route sends the charges it matches to its gateways. The first matching route wins. A Route
// is also the schema of one entry of a configuration file's routes (docs/configuration.md):
// package config holds them as they are.
type Route struct {
	// Name names the route in metrics, logs and answers; unique.
	Name  string `yaml:"name"`
	Match Match  `yaml:"match"`
	// Gateways are tried in this order.
	Gateways []string `yaml:"gateways"`
	// Split, when set, picks the first gateway by weight; the rest follow in Split's order. In a
	// file it is a mapping of gateway names to weights, kept in the file's order.
	Split []Weight `yaml:"split"`
	// Strategy reorders those gateways for each charge; "": Ordered (strategy.go).
	Strategy Strategy `yaml:"strategy"`
	// Hedge, when set, sends a slow charge to the next gateway too (hedge.go); nil: never.
	Hedge *Hedge `yaml:"hedge"`
}

// Weight is one gateway's share of a route's first choices.
type Weight struct {
	Gateway string
	Weight  int
}

// Members returns the gateways the route may call, in its order: Gateways, or Split's.
func (r Route) Members() []string {
	if len(r.Gateways) > 0 || len(r.Split) == 0 {
		return r.Gateways
	}
	names := make([]string, len(r.Split))
	for i, w := range r.Split {
		names[i] = w.Gateway
	}
	return names
}

// Match selects charges: every set field must match (AND), any value of a list (OR). The zero
// Match selects every charge.
type Match struct {
	Currency  []string `yaml:"currency"`   // ISO 4217 codes; none: any currency
	Country   []string `yaml:"country"`    // ISO 3166 alpha-2 codes; none: any country
	MinAmount int64    `yaml:"min_amount"` // 0: no lower bound
	MaxAmount int64    `yaml:"max_amount"` // 0: no upper bound
}

// All reports whether m selects every charge (it sets no field).
func (m Match) All() bool {
	return len(m.Currency) == 0 && len(m.Country) == 0 && m.MinAmount == 0 && m.MaxAmount == 0
}

// Matches reports whether a charge of that amount, currency and country falls under m.
func (m Match) Matches(amount int64, currency, country string) bool {
	if len(m.Currency) > 0 && !slices.Contains(m.Currency, currency) {
		return false
	}
	if len(m.Country) > 0 && !slices.Contains(m.Country, country) {
		return false
	}
	if m.MinAmount > 0 && amount < m.MinAmount {
		return false
	}
	if m.MaxAmount > 0 && amount > m.MaxAmount {
		return false
	}
	return true
}

// order returns the gateways to try, in order: with a split, one drawn by weight first, then the
// others in listed order.
func (r Route) order(rnd func(n int) int) []string {
	if len(r.Split) == 0 {
		return r.Gateways
	}
	total := 0
	for _, w := range r.Split {
		total += w.Weight
	}
	first := r.Split[0].Gateway
	if total > 0 {
		pick := rnd(total)
		for _, w := range r.Split {
			if pick < w.Weight {
				first = w.Gateway
				break
			}
			pick -= w.Weight
		}
	}
	out := make([]string, 0, len(r.Gateways)+len(r.Split))
	out = append(out, first)
	for _, w := range r.Split {
		if w.Gateway != first {
			out = append(out, w.Gateway)
		}
	}
	for _, g := range r.Gateways {
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// randIntN is the weighted draw's source of randomness.
func randIntN(n int) int { return rand.IntN(n) }
