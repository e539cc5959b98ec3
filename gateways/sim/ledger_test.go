package sim_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/payrouter/payrouter/gateways/sim"
)

func TestLedgerCreateIsIdempotent(t *testing.T) {
	l := sim.NewLedger("tx_", "op_")
	first, created := l.Create(sim.NewTx{Reference: "r1", Amount: 500, Currency: "USD", Capture: true, Fingerprint: "a"})
	if !created || first.ID != "tx_000001" || first.Status != sim.StatusCaptured {
		t.Fatalf("Create = %+v, %v", first, created)
	}
	again, created := l.Create(sim.NewTx{Reference: "r1", Amount: 999, Currency: "EUR", Fingerprint: "b"})
	if created || again != first {
		t.Fatalf("Create with the same reference = %+v, %v; want the first transaction, unchanged", again, created)
	}
	noRef1, _ := l.Create(sim.NewTx{Amount: 1, Currency: "USD"})
	noRef2, _ := l.Create(sim.NewTx{Amount: 1, Currency: "USD"})
	if noRef1.ID == noRef2.ID {
		t.Fatal("charges without a reference are never deduplicated")
	}
	if got := len(l.Transactions()); got != 3 {
		t.Fatalf("%d transactions, want 3", got)
	}
}

func TestLedgerConcurrentCreate(t *testing.T) {
	l := sim.NewLedger("tx_", "op_")
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { l.Create(sim.NewTx{Reference: "same", Amount: 1, Currency: "USD"}) })
		wg.Go(func() { l.Transactions() })
	}
	wg.Wait()
	if got := len(l.Transactions()); got != 1 {
		t.Fatalf("50 concurrent creates with one reference made %d transactions", got)
	}
}

func TestLedgerOperations(t *testing.T) {
	type step struct {
		name    string
		do      func(l *sim.Ledger) (sim.OpResult, error)
		wantErr error
		status  sim.TxStatus
		amount  int64 // the transaction's amount after the step
		refund  int64 // its refunded total
	}
	capture := func(op, key string, amount int64) func(*sim.Ledger) (sim.OpResult, error) {
		return func(l *sim.Ledger) (sim.OpResult, error) { return l.Capture(op, key, amount) }
	}
	void := func(op, key string) func(*sim.Ledger) (sim.OpResult, error) {
		return func(l *sim.Ledger) (sim.OpResult, error) { return l.Void(op, key) }
	}
	refund := func(op, key string, amount int64) func(*sim.Ledger) (sim.OpResult, error) {
		return func(l *sim.Ledger) (sim.OpResult, error) { return l.Refund(op, key, amount) }
	}
	cases := []struct {
		name    string
		capture bool
		steps   []step
	}{
		{"capture in full, by reference", false, []step{
			{"refund before capture", refund("re1", "r", 10), sim.ErrState, "", 0, 0},
			{"capture", capture("c1", "r", 0), nil, sim.StatusCaptured, 1000, 0},
			{"capture again, same op", capture("c1", "r", 0), nil, sim.StatusCaptured, 1000, 0},
			{"capture again, new op", capture("c2", "r", 0), sim.ErrState, "", 0, 0},
			{"void a captured one", void("v1", "r"), sim.ErrState, "", 0, 0},
		}},
		{"partial capture by id releases the rest", false, []step{
			{"capture too much", capture("c1", "tx_000001", 1001), sim.ErrAmount, "", 0, 0},
			{"capture part", capture("c2", "tx_000001", 600), nil, sim.StatusCaptured, 600, 0},
			{"refund all that is left", refund("re1", "r", 0), nil, sim.StatusRefunded, 600, 600},
		}},
		{"void", false, []step{
			{"void", void("v1", "r"), nil, sim.StatusVoided, 1000, 0},
			{"void again, same op", void("v1", "r"), nil, sim.StatusVoided, 1000, 0},
			{"capture a voided one", capture("c1", "r", 0), sim.ErrState, "", 0, 0},
		}},
		{"refunds", true, []step{
			{"refund part", refund("re1", "r", 300), nil, sim.StatusPartiallyRefunded, 1000, 300},
			{"the same refund again", refund("re1", "r", 300), nil, sim.StatusPartiallyRefunded, 1000, 300},
			{"refund more than is left", refund("re2", "r", 701), sim.ErrAmount, "", 0, 0},
			{"refund a negative amount", refund("re3", "r", -1), sim.ErrAmount, "", 0, 0},
			{"refund the rest", refund("re4", "r", 700), nil, sim.StatusRefunded, 1000, 1000},
			{"refund a refunded one", refund("re5", "r", 1), sim.ErrState, "", 0, 0},
		}},
		{"unknown transaction", true, []step{
			{"capture", capture("c1", "nope", 0), sim.ErrNotFound, "", 0, 0},
			{"void", void("v1", "nope"), sim.ErrNotFound, "", 0, 0},
			{"refund", refund("re1", "nope", 1), sim.ErrNotFound, "", 0, 0},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := sim.NewLedger("tx_", "op_")
			l.Create(sim.NewTx{Reference: "r", Amount: 1000, Currency: "USD", Capture: c.capture})
			for _, s := range c.steps {
				res, err := s.do(l)
				if !errors.Is(err, s.wantErr) {
					t.Fatalf("%s: err %v, want %v", s.name, err, s.wantErr)
				}
				if err != nil {
					continue
				}
				if res.Tx.Status != s.status || res.Tx.Amount != s.amount || res.Tx.Refunded != s.refund || res.ID == "" {
					t.Fatalf("%s: %+v, want status %s, amount %d, refunded %d", s.name, res, s.status, s.amount, s.refund)
				}
				if got, _ := l.Lookup("r"); got != res.Tx {
					t.Fatalf("%s: Lookup = %+v, the operation answered %+v", s.name, got, res.Tx)
				}
			}
		})
	}
}

func TestLedgerDeclinesAreKeptNotListed(t *testing.T) {
	l := sim.NewLedger("tx_", "op_")
	d, _ := l.Create(sim.NewTx{Reference: "r", Amount: 100, Currency: "USD", Decline: "generic_decline"})
	if d.Status != sim.StatusDeclined || d.DeclineCode != "generic_decline" {
		t.Fatalf("declined charge: %+v", d)
	}
	if got, ok := l.Lookup("r"); !ok || got != d {
		t.Fatalf("Lookup of a declined charge = %+v, %v", got, ok)
	}
	if got := l.Transactions(); len(got) != 0 {
		t.Fatalf("Transactions lists a decline: %+v", got)
	}
	if _, err := l.Capture("c", "r", 0); !errors.Is(err, sim.ErrState) {
		t.Fatalf("capture of a decline: %v", err)
	}
}

func TestLedgerResetKeepsCountingIDs(t *testing.T) {
	l := sim.NewLedger("tx_", "op_")
	a, _ := l.Create(sim.NewTx{Reference: "r", Amount: 1, Currency: "USD"})
	l.Reset()
	if _, ok := l.Lookup("r"); ok || len(l.Transactions()) != 0 {
		t.Fatal("Reset left a transaction")
	}
	b, _ := l.Create(sim.NewTx{Reference: "r", Amount: 1, Currency: "USD"})
	if a.ID == b.ID {
		t.Fatalf("an id from before the reset (%s) names a new transaction", a.ID)
	}
	for i := range 3 {
		l.Create(sim.NewTx{Reference: fmt.Sprint("order-", i), Amount: 1, Currency: "USD"})
	}
	list := l.Transactions()
	for i, tx := range list[1:] {
		if tx.Reference != fmt.Sprint("order-", i) {
			t.Fatalf("Transactions not in creation order: %+v", list)
		}
	}
}

func TestLedgerRefundUnchecked(t *testing.T) {
	l := sim.NewLedger("tx_", "op_")
	l.Create(sim.NewTx{Reference: "c", Amount: 1000, Currency: "USD", Capture: true})
	l.Create(sim.NewTx{Reference: "a", Amount: 1000, Currency: "USD"})
	l.Create(sim.NewTx{Reference: "d", Amount: 1000, Currency: "USD", Decline: "no"})

	steps := []struct {
		op, key  string
		amount   int64
		wantErr  error
		refunded int64 // the transaction's total after the step
		status   sim.TxStatus
	}{
		{"re1", "c", 1000, nil, 1000, sim.StatusRefunded},
		{"re2", "c", 1000, nil, 2000, sim.StatusRefunded},
		{"re2", "c", 1000, nil, 2000, sim.StatusRefunded}, // the same op: replayed, not applied again
		{"re3", "c", 300, nil, 2300, sim.StatusRefunded},
		{"re4", "c", 0, nil, 3300, sim.StatusRefunded}, // nothing left: 0 is the whole amount again
		{"re5", "c", -1, sim.ErrAmount, 3300, sim.StatusRefunded},
		{"re6", "a", 100, sim.ErrState, 0, sim.StatusAuthorized},
		{"re7", "d", 100, sim.ErrState, 0, sim.StatusDeclined},
		{"re8", "nowhere", 100, sim.ErrNotFound, 0, ""},
	}
	for _, st := range steps {
		_, err := l.RefundUnchecked(st.op, st.key, st.amount)
		if !errors.Is(err, st.wantErr) {
			t.Fatalf("RefundUnchecked(%s, %s, %d) = %v, want %v", st.op, st.key, st.amount, err, st.wantErr)
		}
		tx, _ := l.Lookup(st.key)
		if tx.Refunded != st.refunded || tx.Status != st.status {
			t.Fatalf("after RefundUnchecked(%s, %s, %d): %+v; want refunded %d, %s", st.op, st.key, st.amount, tx, st.refunded, st.status)
		}
	}

	// A partial refund below the amount, unchecked, is partially_refunded; the checked Refund
	// refuses what an unchecked one would approve.
	l.Create(sim.NewTx{Reference: "p", Amount: 1000, Currency: "USD", Capture: true})
	if res, err := l.RefundUnchecked("rp1", "p", 600); err != nil || res.Tx.Status != sim.StatusPartiallyRefunded {
		t.Fatalf("RefundUnchecked 600 of 1000 = %+v, %v; want partially_refunded", res.Tx, err)
	}
	if _, err := l.Refund("rp2", "p", 600); !errors.Is(err, sim.ErrAmount) {
		t.Fatalf("Refund 600 with 400 left = %v; want ErrAmount", err)
	}
}

func TestLedgerConcurrentRefundUnchecked(t *testing.T) {
	l := sim.NewLedger("tx_", "op_")
	l.Create(sim.NewTx{Reference: "c", Amount: 1000, Currency: "USD", Capture: true})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { _, _ = l.RefundUnchecked(fmt.Sprint("re", i), "c", 1000) })
		wg.Go(func() { _, _ = l.RefundUnchecked(fmt.Sprint("re", i), "c", 1000) }) // each op twice
	}
	wg.Wait()
	if tx, _ := l.Lookup("c"); tx.Refunded != 8000 {
		t.Fatalf("8 refunds of 1000, each sent twice, unchecked: refunded %d, want 8000", tx.Refunded)
	}
}
