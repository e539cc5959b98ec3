package routing

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// Strategy orders a route's gateways for each charge.
type Strategy string

// The strategies of a route.
const (
	// Ordered tries the gateways as listed, or split's weighted first choice then the rest. The
	// zero Strategy is Ordered.
	Ordered Strategy = "ordered"
	// SuccessRate puts first the gateway that approved the largest share of its recent
	// authorizations (approved / (approved + declined) over approvalWindow). Failures and open
	// breakers do not count: they are the breaker's business, and it passes such a gateway
	// anyway. A gateway with fewer than minApprovalSamples recent answers counts as 1.0, so it
	// is tried and learnt about; exploreShare of the charges keep the route's own order, so a
	// gateway that recovers gets traffic back. Rates within rateMargin of the best count as
	// the best, so the route's order stands between gateways that approve alike instead of
	// flapping on every decline.
	SuccessRate Strategy = "success_rate"
)

const (
	approvalBucket     = 10 * time.Second
	approvalBuckets    = 30 // approvalWindow = 5 minutes
	approvalWindow     = approvalBuckets * approvalBucket
	minApprovalSamples = 20
	exploreShare       = 5    // percent of charges that keep the route's order
	rateMargin         = 0.05 // rates this close to the best count as the best
)

// gatewayStats is what recent charge attempts tell of one gateway: their latencies (hedge
// delays) and their approvals (SuccessRate).
type gatewayStats struct {
	latency   latencies
	approvals approvalRate
}

// newTable makes a table of routes and gateways over set, carrying over from prev (nil: none) the
// learning state of each gateway and the hedge budget of each hedged route whose share is the same.
func newTable(prev *table, routes []Route, gateways map[string]payrouter.Gateway, set *resilience.DomainSet) *table {
	t := &table{routes: routes, index: indexRoutes(routes), gw: &Gateways{Adapters: gateways, Domains: set},
		stats: make(map[string]*gatewayStats, len(gateways)), hedgeBudgets: map[string]*hedgeBudget{}}
	for name := range gateways {
		if prev != nil && prev.stats[name] != nil {
			t.stats[name] = prev.stats[name]
		} else {
			t.stats[name] = &gatewayStats{}
		}
	}
	for _, rt := range routes {
		if rt.Hedge == nil {
			continue
		}
		share := rt.Hedge.Budget
		if share <= 0 || share > 1 {
			share = DefaultHedgeBudget
		}
		if prev != nil && prev.hedgeBudgets[rt.Name] != nil && prev.hedgeBudgets[rt.Name].share == share {
			t.hedgeBudgets[rt.Name] = prev.hedgeBudgets[rt.Name]
		} else {
			t.hedgeBudgets[rt.Name] = &hedgeBudget{share: share}
		}
	}
	return t
}

// approvalRate counts a gateway's approvals and declines over a sliding window of time, in
// buckets, so old answers fall out and a gateway's recovery shows within the window.
type approvalRate struct {
	mu      sync.Mutex
	buckets [approvalBuckets]approvalCount
}

type approvalCount struct {
	slot               int64 // which approvalBucket since the epoch this bucket counts
	approved, declined int
}

func (w *approvalRate) add(now time.Time, approved bool) {
	slot := now.UnixNano() / int64(approvalBucket)
	w.mu.Lock()
	defer w.mu.Unlock()
	b := &w.buckets[slot%approvalBuckets]
	if b.slot != slot {
		*b = approvalCount{slot: slot}
	}
	if approved {
		b.approved++
	} else {
		b.declined++
	}
}

// rate is approved / (approved + declined) within the window; 1.0 below minApprovalSamples.
func (w *approvalRate) rate(now time.Time) float64 {
	slot := now.UnixNano() / int64(approvalBucket)
	w.mu.Lock()
	defer w.mu.Unlock()
	var approved, total int
	for _, b := range w.buckets {
		if b.slot > slot-approvalBuckets && b.slot <= slot {
			approved += b.approved
			total += b.approved + b.declined
		}
	}
	if total < minApprovalSamples {
		return 1
	}
	return float64(approved) / float64(total)
}

// orderOf returns the gateways to try for one charge of rt, in order, by its strategy.
func (r *Router) orderOf(tab *table, rt Route) []string {
	gateways := rt.order(r.rnd)
	if rt.Strategy != SuccessRate || r.rnd(100) < exploreShare {
		return gateways
	}
	now := r.now()
	rates := make(map[string]float64, len(gateways))
	for _, g := range gateways {
		rates[g] = 1
		if st := tab.stats[g]; st != nil {
			rates[g] = st.approvals.rate(now)
		}
	}
	// Each place goes to the earliest listed of the gateways left whose rate is within
	// rateMargin of the best rate left.
	left := slices.Clone(gateways)
	out := make([]string, 0, len(left))
	for len(left) > 0 {
		best := slices.MaxFunc(left, func(a, b string) int { return cmp.Compare(rates[a], rates[b]) })
		i := slices.IndexFunc(left, func(g string) bool { return rates[g] >= rates[best]-rateMargin })
		out = append(out, left[i])
		left = slices.Delete(left, i, i+1)
	}
	return out
}
