package e2e

// Reading the simulators' ledgers as money: what each gateway holds for each charge, for the
// money checks of the chaos test.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
)

// ledgerEntry is one transaction of GET /_sim/ledger, with the gateway that holds it.
type ledgerEntry struct {
	Gateway   string `json:"-"`
	Reference string `json:"reference"`
	ID        string `json:"id"` // the gateway's own id: payrouter's gateway_reference
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Status    string `json:"status"`
	Refunded  int64  `json:"refunded"`
}

func (e ledgerEntry) String() string {
	s := fmt.Sprintf("%s %s %s %d %s", e.Gateway, e.Reference, e.ID, e.Amount, e.Status)
	if e.Refunded > 0 {
		s += fmt.Sprintf(" (refunded %d)", e.Refunded)
	}
	return s
}

// held is the money the transaction still holds: an authorization's amount, or what is left of a
// capture after its refunds.
func (e ledgerEntry) held() int64 {
	switch e.Status {
	case "authorized":
		return e.Amount
	case "captured", "partially_refunded":
		return e.Amount - e.Refunded
	default: // voided, refunded
		return 0
	}
}

// released reports whether the transaction gave all its money back: voided, or refunded in full.
func (e ledgerEntry) released() bool {
	return e.Status == "voided" || (e.Status == "refunded" && e.Refunded == e.Amount)
}

// entries reads the simulator's ledger without ending the test, for goroutines and for checks
// that report rather than stop.
func (s *sim) entries() ([]ledgerEntry, error) {
	r, err := send(s.client, http.MethodGet, s.url+"/_sim/ledger", nil)
	if err != nil {
		return nil, err
	}
	if r.status != http.StatusOK {
		return nil, fmt.Errorf("%s simulator: want 200: %s", s.name, r)
	}
	var l struct {
		Transactions []ledgerEntry `json:"transactions"`
	}
	if err := json.Unmarshal(r.body, &l); err != nil {
		return nil, fmt.Errorf("%s simulator: %v: %s", s.name, err, r)
	}
	for i := range l.Transactions {
		l.Transactions[i].Gateway = s.name
	}
	return l.Transactions, nil
}

// moneyByCharge is every gateway's ledger grouped by the charge each transaction was an attempt
// of (the reference's part before its last "-a", payrouter.AttemptReference).
type moneyByCharge struct {
	charges map[string][]ledgerEntry
	// foreign are transactions whose reference is not an attempt reference.
	foreign []ledgerEntry
	total   int
}

// readMoney reads the ledgers of the three simulated gateways.
func readMoney(s *sims) (moneyByCharge, error) {
	m := moneyByCharge{charges: map[string][]ledgerEntry{}}
	for _, g := range []*sim{s.paywell, s.ding, s.tranglo} {
		list, err := g.entries()
		if err != nil {
			return m, err
		}
		for _, e := range list {
			m.total++
			id, _, ok := splitReference(e.Reference)
			if !ok {
				m.foreign = append(m.foreign, e)
				continue
			}
			m.charges[id] = append(m.charges[id], e)
		}
	}
	for _, list := range m.charges {
		sort.Slice(list, func(i, j int) bool { return list[i].Reference < list[j].Reference })
	}
	return m, nil
}

// holding sums what the transactions still hold.
func holding(list []ledgerEntry) int64 {
	var n int64
	for _, e := range list {
		n += e.held()
	}
	return n
}

// describeEntries lists transactions for a failure message.
func describeEntries(list []ledgerEntry) string {
	if len(list) == 0 {
		return "[no transaction]"
	}
	s := "["
	for i, e := range list {
		if i > 0 {
			s += "; "
		}
		s += e.String()
	}
	return s + "]"
}
