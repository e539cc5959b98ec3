package sim

import (
	"errors"
	"fmt"
	"sync"
)

// TxStatus is the state of a transaction in a simulated gateway's ledger.
type TxStatus string

// The states of a ledger transaction. The first six are what GET /_sim/ledger shows; declined
// transactions are kept but not listed (see Ledger).
const (
	// StatusPending is a charge the gateway has taken but not decided yet (Behavior.Pending):
	// Ledger.Settle makes it what it was to be.
	StatusPending           TxStatus = "pending"
	StatusAuthorized        TxStatus = "authorized"
	StatusCaptured          TxStatus = "captured"
	StatusVoided            TxStatus = "voided"
	StatusRefunded          TxStatus = "refunded"
	StatusPartiallyRefunded TxStatus = "partially_refunded"
	StatusDeclined          TxStatus = "declined"
)

// Errors of ledger operations, checked with errors.Is; each fake maps them to its wire form.
var (
	// ErrNotFound: no transaction with that id or reference.
	ErrNotFound = errors.New("no such transaction")
	// ErrState: the operation does not apply to the transaction in its present state (capturing
	// a voided one, refunding an uncaptured one).
	ErrState = errors.New("invalid transaction state")
	// ErrAmount: the amount is not positive, or more than can be captured or refunded.
	ErrAmount = errors.New("invalid amount")
)

// Tx is one gateway-side transaction, as GET /_sim/ledger shows it.
type Tx struct {
	// Reference is the idempotency reference payrouter sent with the charge.
	Reference string `json:"reference"`
	// ID is the gateway's own id of the transaction (payrouter's GatewayReference).
	ID       string   `json:"id"`
	Amount   int64    `json:"amount"`
	Currency string   `json:"currency"`
	Status   TxStatus `json:"status"`
	Refunded int64    `json:"refunded"`
	// DeclineCode is the fake's own reason for a declined transaction, replayed on a repeat.
	DeclineCode string `json:"-"`
	// Fingerprint is what the fake made of the charge's details, so that it can tell a retry
	// from another charge reusing the reference.
	Fingerprint string `json:"-"`
	// settles is what a pending transaction becomes when Settle decides it.
	settles TxStatus
}

// NewTx is a charge as a fake received it.
type NewTx struct {
	Reference string // the idempotency reference; "" means none, never deduplicated
	Amount    int64
	Currency  string
	Capture   bool   // capture at once, else authorize only
	Decline   string // non-empty: the charge is declined, with this fake-specific code
	// Fingerprint is kept with the transaction (see Tx.Fingerprint).
	Fingerprint string
	// Pending records the charge as StatusPending, to become what it would have been at once
	// (authorized, captured or declined) when Settle is called.
	Pending bool
}

// OpResult is what a capture, void or refund did.
type OpResult struct {
	// ID is the operation's own id (a refund's id); unique within the ledger.
	ID string
	// Amount is how much this operation captured or refunded (0 for a void).
	Amount int64
	// Tx is the transaction just after the operation.
	Tx Tx
}

// Ledger is a simulated gateway's record of transactions, keyed by the reference payrouter sent.
// It is safe for concurrent use.
//
// Declined charges are kept, so that a repeated reference and a status look-up answer the same
// decline, but Transactions leaves them out: the contract's ledger lists money the gateway moved
// or holds (authorized, captured, voided, refunded, partially refunded).
type Ledger struct {
	txPrefix, opPrefix string

	mu    sync.Mutex
	seq   int // never reset: an id handed out before a reset must not name a later transaction
	txs   []*Tx
	byRef map[string]*Tx
	byID  map[string]*Tx
	// ops keeps each completed capture, void and refund by its kind and reference, so that a
	// repeat answers the same and changes nothing (the idempotency every fake's operations have).
	ops map[string]OpResult
}

// NewLedger returns an empty ledger whose transaction ids start with txPrefix and operation ids
// with opPrefix.
func NewLedger(txPrefix, opPrefix string) *Ledger {
	l := &Ledger{txPrefix: txPrefix, opPrefix: opPrefix}
	l.reset()
	return l
}

func (l *Ledger) reset() {
	l.txs = nil
	l.byRef = map[string]*Tx{}
	l.byID = map[string]*Tx{}
	l.ops = map[string]OpResult{}
}

// Reset empties the ledger. Ids keep counting up.
func (l *Ledger) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reset()
}

func (l *Ledger) nextID(prefix string) string {
	l.seq++
	return fmt.Sprintf("%s%06d", prefix, l.seq)
}

// Create records a new charge, or, when n.Reference was seen before, returns the transaction it
// created then, unchanged (created is false): the same reference never makes a second
// transaction. The caller decides whether a repeat with other details is an error.
func (l *Ledger) Create(n NewTx) (tx Tx, created bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n.Reference != "" {
		if t, ok := l.byRef[n.Reference]; ok {
			return *t, false
		}
	}
	t := &Tx{
		Reference:   n.Reference,
		ID:          l.nextID(l.txPrefix),
		Amount:      n.Amount,
		Currency:    n.Currency,
		Status:      StatusAuthorized,
		Fingerprint: n.Fingerprint,
	}
	switch {
	case n.Decline != "":
		t.Status, t.DeclineCode = StatusDeclined, n.Decline
	case n.Capture:
		t.Status = StatusCaptured
	}
	if n.Pending {
		t.settles, t.Status = t.Status, StatusPending
	}
	l.txs = append(l.txs, t)
	l.byID[t.ID] = t
	if n.Reference != "" {
		l.byRef[n.Reference] = t
	}
	return *t, true
}

// find resolves a transaction by the gateway's id or, failing that, by payrouter's reference:
// either is what a caller may hold after a charge whose answer was lost.
func (l *Ledger) find(key string) *Tx {
	if t, ok := l.byID[key]; ok {
		return t
	}
	return l.byRef[key]
}

// Lookup returns the transaction with that gateway id or reference, declined ones included.
func (l *Ledger) Lookup(key string) (Tx, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.find(key)
	if t == nil {
		return Tx{}, false
	}
	return *t, true
}

// Settle decides the pending transaction id: it becomes what it was created to be. settled is
// false when there is no such transaction, or it is not pending (a reset emptied the ledger
// meanwhile).
func (l *Ledger) Settle(id string) (tx Tx, settled bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.byID[id]
	if !ok || t.Status != StatusPending {
		return Tx{}, false
	}
	t.Status, t.settles = t.settles, ""
	return *t, true
}

// Transactions lists the transactions that moved or hold money, in creation order.
func (l *Ledger) Transactions() []Tx {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Tx, 0, len(l.txs))
	for _, t := range l.txs {
		if t.Status != StatusDeclined {
			out = append(out, *t)
		}
	}
	return out
}

// Capture captures an authorized transaction, found by id or reference. amount 0 captures all of
// it; less captures that much and releases the rest (the transaction's amount becomes what was
// captured). opRef, when not empty, makes the call idempotent.
func (l *Ledger) Capture(opRef, key string, amount int64) (OpResult, error) {
	return l.apply("capture", opRef, key, func(t *Tx) (int64, error) {
		if t.Status != StatusAuthorized {
			return 0, fmt.Errorf("%w: cannot capture a %s transaction", ErrState, t.Status)
		}
		if amount == 0 {
			amount = t.Amount
		}
		if amount < 0 || amount > t.Amount {
			return 0, fmt.Errorf("%w: capture of %d on an authorization of %d", ErrAmount, amount, t.Amount)
		}
		t.Amount, t.Status = amount, StatusCaptured
		return amount, nil
	})
}

// Void cancels an authorized, uncaptured transaction.
func (l *Ledger) Void(opRef, key string) (OpResult, error) {
	return l.apply("void", opRef, key, func(t *Tx) (int64, error) {
		if t.Status != StatusAuthorized {
			return 0, fmt.Errorf("%w: cannot void a %s transaction", ErrState, t.Status)
		}
		t.Status = StatusVoided
		return 0, nil
	})
}

// Refund gives back amount of a captured transaction; 0 refunds all that is left. A fake's
// handler calls Server.Refund instead, which honours Behavior.RefundUnchecked.
func (l *Ledger) Refund(opRef, key string, amount int64) (OpResult, error) {
	return l.apply("refund", opRef, key, func(t *Tx) (int64, error) {
		if t.Status != StatusCaptured && t.Status != StatusPartiallyRefunded {
			return 0, fmt.Errorf("%w: cannot refund a %s transaction", ErrState, t.Status)
		}
		left := t.Amount - t.Refunded
		if amount == 0 {
			amount = left
		}
		if amount <= 0 || amount > left {
			return 0, fmt.Errorf("%w: refund of %d with %d left to refund", ErrAmount, amount, left)
		}
		t.Refunded += amount
		t.Status = StatusPartiallyRefunded
		if t.Refunded == t.Amount {
			t.Status = StatusRefunded
		}
		return amount, nil
	})
}

// RefundUnchecked is Refund at a gateway that does not check what is left to refund
// (Behavior.RefundUnchecked): any positive amount of a captured transaction is approved, and
// Refunded may go beyond Amount. 0 refunds all that is left, or the whole amount again when
// nothing is. The transaction's state is still checked, and opRef still makes the call
// idempotent.
func (l *Ledger) RefundUnchecked(opRef, key string, amount int64) (OpResult, error) {
	return l.apply("refund", opRef, key, func(t *Tx) (int64, error) {
		if t.Status != StatusCaptured && t.Status != StatusPartiallyRefunded && t.Status != StatusRefunded {
			return 0, fmt.Errorf("%w: cannot refund a %s transaction", ErrState, t.Status)
		}
		if amount == 0 {
			amount = t.Amount - t.Refunded
			if amount <= 0 {
				amount = t.Amount
			}
		}
		if amount <= 0 {
			return 0, fmt.Errorf("%w: refund of %d", ErrAmount, amount)
		}
		t.Refunded += amount
		t.Status = StatusPartiallyRefunded
		if t.Refunded >= t.Amount {
			t.Status = StatusRefunded
		}
		return amount, nil
	})
}

// apply runs one operation under the lock, replaying the recorded result of an earlier successful
// operation of the same kind with the same opRef. A refused operation changed nothing, so it is
// not recorded and a retry is judged afresh.
func (l *Ledger) apply(kind, opRef, key string, op func(*Tx) (int64, error)) (OpResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	opKey := kind + "\x00" + opRef
	if opRef != "" {
		if res, ok := l.ops[opKey]; ok {
			return res, nil
		}
	}
	t := l.find(key)
	if t == nil {
		// Not recorded: the transaction may yet be created (its charge still in flight).
		return OpResult{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	amount, err := op(t)
	if err != nil {
		return OpResult{Tx: *t}, err
	}
	res := OpResult{ID: l.nextID(l.opPrefix), Amount: amount, Tx: *t}
	if opRef != "" {
		l.ops[opKey] = res
	}
	return res, nil
}
