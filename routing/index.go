package routing

// routeIndex finds the first route matching a charge without reading every route: a charge's
// currency and country pick at most four short lists of route positions, and only those routes
// are checked, so matching costs the same with one route or ten thousand (docs/architecture.md,
// One charge, end to end). It is built with each table (newTable), so a reload rebuilds it, and never changes
// after: charges read it without a lock.
//
// A route is filed once per pair of its currency and country lists, under the most specific key
// it has: both lists set, under each (currency, country) pair; only currencies, under each
// currency; only countries, under each country; neither (amount bounds only, or no match at all),
// in wildcard. A charge can match only routes filed under its own currency and country, its
// currency alone, its country alone, or wildcard, so the first match is the earliest position of
// those four lists whose route matches in full (amount bounds included): the linear scan's
// answer, first-match order kept.
type routeIndex struct {
	both     map[currencyCountry][]int
	currency map[string][]int
	country  map[string][]int
	wildcard []int
}

// currencyCountry is the key of a route that names both currencies and countries.
type currencyCountry struct{ currency, country string }

// indexRoutes files each route of routes by its position (routeIndex). Each list is in route
// order, a position at most once in it.
func indexRoutes(routes []Route) *routeIndex {
	ix := &routeIndex{both: map[currencyCountry][]int{}, currency: map[string][]int{}, country: map[string][]int{}}
	// add appends i unless it is the list's last already (a code listed twice in one route).
	add := func(list []int, i int) []int {
		if n := len(list); n > 0 && list[n-1] == i {
			return list
		}
		return append(list, i)
	}
	for i, rt := range routes {
		m := rt.Match
		switch {
		case len(m.Currency) > 0 && len(m.Country) > 0:
			for _, cur := range m.Currency {
				for _, cty := range m.Country {
					k := currencyCountry{cur, cty}
					ix.both[k] = add(ix.both[k], i)
				}
			}
		case len(m.Currency) > 0:
			for _, cur := range m.Currency {
				ix.currency[cur] = add(ix.currency[cur], i)
			}
		case len(m.Country) > 0:
			for _, cty := range m.Country {
				ix.country[cty] = add(ix.country[cty], i)
			}
		default:
			ix.wildcard = append(ix.wildcard, i)
		}
	}
	return ix
}

// first returns the position in routes (the ones ix was built of) of the first route matching a
// charge of that amount, currency and country, or -1 when none does.
func (ix *routeIndex) first(routes []Route, amount int64, currency, country string) int {
	best := -1
	// scan lowers best to the first position of list, below best, whose route matches. The
	// lists are in route order, so it stops at the first such route or at best.
	scan := func(list []int) {
		for _, i := range list {
			if best >= 0 && i >= best {
				return
			}
			if routes[i].Match.Matches(amount, currency, country) {
				best = i
				return
			}
		}
	}
	// An empty map is passed without hashing the key: most configurations leave some empty.
	if len(ix.both) > 0 {
		scan(ix.both[currencyCountry{currency, country}])
	}
	if len(ix.currency) > 0 {
		scan(ix.currency[currency])
	}
	if len(ix.country) > 0 {
		scan(ix.country[country])
	}
	scan(ix.wildcard)
	return best
}
