package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/pgstore/pgtest"
)

const (
	fpA = "sha256:aaaa"
	fpB = "sha256:bbbb"
)

func testCharge(id string, status payrouter.ChargeStatus) *payrouter.Charge {
	return &payrouter.Charge{
		ID: id, Status: status, Amount: 1999, Currency: "USD",
		PaymentMethod: payrouter.PaymentMethod{Type: "card", Token: "tok_visa_4242424242"},
		Reference:     payrouter.AttemptReference(id, 1),
		CreatedAt:     time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	}
}

func testRecord(status int) payrouter.IdempotencyRecord {
	return payrouter.IdempotencyRecord{Fingerprint: fpA, Status: status,
		Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"status":` + fmt.Sprint(status) + `}`)}
}

// waitClaim claims key until the earlier hold on it has run out and returns the new hold.
func waitClaim(t *testing.T, s *Store, key string) payrouter.Hold {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, h, err := s.Claim(t.Context(), "", key, fpA, time.Hour)
		switch {
		case err == nil && rec == nil && h.Held():
			return h
		case err != nil && !errors.Is(err, payrouter.ErrInFlight):
			t.Fatalf("Claim(%s): %v", key, err)
		case time.Now().After(deadline):
			t.Fatalf("Claim(%s) = %+v, %+v, %v: the earlier hold did not run out", key, rec, h, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConcurrentClaimsOneWinner: instances racing for one key, each through its own pool as a
// fleet would, get exactly one hold between them, both for a new key (racing inserts) and for
// a key whose hold ran out (racing take-overs of the same row).
func TestConcurrentClaimsOneWinner(t *testing.T) {
	url := pgtest.NewDatabase(t)
	// 40 claims of one row queue on its lock; under -race on a loaded 2-core machine the queue
	// outlasted the 800 ms a store call is given in production, and claims answered "store
	// unavailable" (which a storefront would see as a 503 to retry, never as a second hold).
	// This test is about who wins, not how fast: the bound is outage_test.go's.
	opts := Options{Timeout: 30 * time.Second}
	stores := []*Store{open(t, url, opts), open(t, url, opts)}
	race := func(key string) (winners []payrouter.Hold) {
		const racers = 40
		var (
			mu    sync.Mutex
			wg    sync.WaitGroup
			start = make(chan struct{})
		)
		for i := range racers {
			s := stores[i%len(stores)]
			wg.Go(func() {
				<-start
				rec, h, err := s.Claim(t.Context(), "", key, fpA, time.Hour)
				switch {
				case err == nil && rec == nil && h.Held():
					mu.Lock()
					winners = append(winners, h)
					mu.Unlock()
				case errors.Is(err, payrouter.ErrInFlight):
				default:
					t.Errorf("Claim(%s) = %+v, %+v, %v; want a hold or ErrInFlight", key, rec, h, err)
				}
			})
		}
		close(start)
		wg.Wait()
		return winners
	}

	for round := range 5 {
		key := fmt.Sprintf("k-race-%d", round)
		first := race(key)
		if len(first) != 1 {
			t.Fatalf("new key %s: %d winners of one race, want exactly 1: %+v", key, len(first), first)
		}
		// The winner's hold runs out (moved back rather than waited for, so that a slow race
		// cannot outlast a short hold and crown a second winner legitimately).
		if _, err := stores[0].pool.Exec(t.Context(), `UPDATE idempotency_keys SET held_until = now() - interval '1 second' WHERE key = $1`, key); err != nil {
			t.Fatal(err)
		}
		second := race(key)
		if len(second) != 1 {
			t.Fatalf("key %s whose hold ran out: %d winners, want exactly 1: %+v", key, len(second), second)
		}
		if second[0].Token <= first[0].Token {
			t.Fatalf("key %s taken over with token %d, not larger than the earlier %d", key, second[0].Token, first[0].Token)
		}
	}
}

// TestStaleHolderChangesNothing: a holder that stalled past its hold while another instance
// took the key can neither save the charge, nor complete the key, nor both at once; the charge
// and the key stay exactly as the new holder has them.
func TestStaleHolderChangesNothing(t *testing.T) {
	url := pgtest.NewDatabase(t)
	stalled, other := open(t, url, Options{}), open(t, url, Options{})
	ctx := t.Context()

	_, stale, err := stalled.Claim(ctx, "", "k-stale", fpA, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c := testCharge("ch_stale", payrouter.StatusProcessing)
	c.Hold = stale
	if err := stalled.SaveCharge(ctx, c); err != nil {
		t.Fatalf("SaveCharge under the live hold: %v", err)
	}

	later := waitClaim(t, other, "k-stale")
	mine := testCharge("ch_stale", payrouter.StatusProcessing)
	mine.Hold, mine.Attempts = later, []payrouter.Attempt{{Gateway: "ding", Outcome: payrouter.OutcomeTimeout}}
	mine.Stored = c.Stored // the later request read what the stalled one stored
	if err := other.SaveCharge(ctx, mine); err != nil {
		t.Fatalf("SaveCharge under the later hold: %v", err)
	}

	c.Status, c.Gateway = payrouter.StatusSucceeded, "paywell"
	for name, call := range map[string]func() error{
		"SaveCharge":     func() error { return stalled.SaveCharge(ctx, c) },
		"Complete":       func() error { return stalled.Complete(ctx, stale, testRecord(201), time.Hour) },
		"CompleteCharge": func() error { return stalled.CompleteCharge(ctx, c, stale, testRecord(201), time.Hour) },
		"Renew":          func() error { return stalled.Renew(ctx, stale, time.Hour) },
	} {
		if err := call(); !errors.Is(err, payrouter.ErrHoldLost) {
			t.Errorf("%s with the stale hold = %v; want ErrHoldLost", name, err)
		} else if errors.Is(err, payrouter.ErrStateUnavailable) {
			t.Errorf("%s with the stale hold = %v; a lost hold is an answer, not unavailability", name, err)
		}
	}
	if err := stalled.Release(ctx, stale); err != nil {
		t.Errorf("Release with the stale hold: %v", err)
	}

	got, err := other.Charge(ctx, "ch_stale")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != payrouter.StatusProcessing || got.Gateway != "" || len(got.Attempts) != 1 {
		t.Errorf("charge after the stale holder's writes = %+v; want the later holder's", got)
	}
	if _, _, err := other.Claim(ctx, "", "k-stale", fpA, time.Hour); !errors.Is(err, payrouter.ErrInFlight) {
		t.Errorf("Claim after the stale holder's writes = %v; want ErrInFlight (still the later holder's)", err)
	}

	// The later holder completes as if nothing happened.
	mine.Status = payrouter.StatusDeclined
	if err := other.CompleteCharge(ctx, mine, later, testRecord(402), time.Hour); err != nil {
		t.Fatalf("CompleteCharge under the later hold: %v", err)
	}
	rec, _, err := stalled.Claim(ctx, "", "k-stale", fpA, time.Hour)
	if err != nil || rec == nil || rec.Status != 402 {
		t.Fatalf("Claim after the later holder completed = %+v, %v; want its 402", rec, err)
	}
}

// TestSaveChargeFencedAgainstConcurrentClaim races a stale holder's saves against the claim
// that takes its key over, many times: once the claim has returned, no save that began after
// it may land, and every save reported successful must have been written before the claim.
func TestSaveChargeFencedAgainstConcurrentClaim(t *testing.T) {
	url := pgtest.NewDatabase(t)
	stalled, other := open(t, url, Options{}), open(t, url, Options{})
	ctx := t.Context()
	for round := range 20 {
		key, id := fmt.Sprintf("k-fence-%d", round), fmt.Sprintf("ch_fence_%d", round)
		_, stale, err := stalled.Claim(ctx, "", key, fpA, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond)
		var wg sync.WaitGroup
		var later payrouter.Hold
		wg.Go(func() { later = waitClaim(t, other, key) })
		saved := 0
		c := testCharge(id, payrouter.StatusProcessing)
		c.Hold = stale
		for n := 1; n <= 20; n++ {
			c.Amount = int64(n)
			err := stalled.SaveCharge(ctx, c)
			if err == nil {
				saved = n
			} else if !errors.Is(err, payrouter.ErrHoldLost) {
				t.Fatalf("SaveCharge: %v", err)
			}
		}
		wg.Wait()
		c.Amount = 999
		if err := stalled.SaveCharge(ctx, c); !errors.Is(err, payrouter.ErrHoldLost) {
			t.Fatalf("round %d: SaveCharge after the key was taken (token %d) = %v; want ErrHoldLost", round, later.Token, err)
		}
		got, err := other.Charge(ctx, id)
		switch {
		case saved == 0 && !errors.Is(err, payrouter.ErrNotFound):
			t.Fatalf("round %d: no save succeeded, yet Charge = %+v, %v", round, got, err)
		case saved > 0 && (err != nil || got.Amount != int64(saved)):
			t.Fatalf("round %d: the last successful save had amount %d; Charge = %+v, %v", round, saved, got, err)
		}
	}
}

// TestCompleteChargeIsAtomic: when the charge's write fails, the key is not completed either
// (it stays in flight, completable by its holder), and the reverse: a refused completion
// writes no charge.
func TestCompleteChargeIsAtomic(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s := open(t, url, Options{})
	ctx := t.Context()
	// A trigger makes the write of one charge fail inside the statement.
	if _, err := s.pool.Exec(ctx, `
CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.id = 'ch_boom' THEN RAISE EXCEPTION 'refusing ch_boom'; END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER refuse_boom BEFORE INSERT OR UPDATE ON charges FOR EACH ROW EXECUTE FUNCTION refuse_boom();`); err != nil {
		t.Fatal(err)
	}

	_, h, err := s.Claim(ctx, "", "k-boom", fpA, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	err = s.CompleteCharge(ctx, testCharge("ch_boom", payrouter.StatusSucceeded), h, testRecord(201), time.Hour)
	if err == nil || !strings.Contains(err.Error(), "refusing ch_boom") {
		t.Fatalf("CompleteCharge of a charge whose write fails = %v; want that failure", err)
	}
	if errors.Is(err, payrouter.ErrHoldLost) || errors.Is(err, payrouter.ErrStateUnavailable) {
		t.Fatalf("CompleteCharge failure %v is neither a lost hold nor unavailability", err)
	}
	if _, _, err := s.Claim(ctx, "", "k-boom", fpA, time.Hour); !errors.Is(err, payrouter.ErrInFlight) {
		t.Fatalf("Claim after the failed CompleteCharge = %v; want ErrInFlight: the key must not be completed without its charge", err)
	}
	// The holder can still complete the key with another answer.
	if err := s.Complete(ctx, h, testRecord(502), time.Hour); err != nil {
		t.Fatalf("Complete after the failed CompleteCharge: %v", err)
	}
	if rec, _, err := s.Claim(ctx, "", "k-boom", fpA, time.Hour); err != nil || rec == nil || rec.Status != 502 {
		t.Fatalf("replay = %+v, %v; want the 502 completed afterwards", rec, err)
	}

	// A completion refused (the hold is lost) writes no charge.
	_, h2, err := s.Claim(ctx, "", "k-gone", fpA, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	lost := payrouter.Hold{Key: h2.Key, Token: h2.Token + 1_000_000}
	if err := s.CompleteCharge(ctx, testCharge("ch_gone", payrouter.StatusSucceeded), lost, testRecord(201), time.Hour); !errors.Is(err, payrouter.ErrHoldLost) {
		t.Fatalf("CompleteCharge with a token that is not the key's = %v; want ErrHoldLost", err)
	}
	if c, err := s.Charge(ctx, "ch_gone"); !errors.Is(err, payrouter.ErrNotFound) {
		t.Fatalf("Charge after a refused CompleteCharge = %+v, %v; want ErrNotFound", c, err)
	}
}

// TestPaymentTokenNeverStored looks at the rows themselves: no column of any charge holds the
// payment token.
func TestPaymentTokenNeverStored(t *testing.T) {
	s := open(t, pgtest.NewDatabase(t), Options{})
	ctx := t.Context()
	c := testCharge("ch_tok", payrouter.StatusProcessing)
	if err := s.SaveCharge(ctx, c); err != nil {
		t.Fatal(err)
	}
	_, h, err := s.Claim(ctx, "", "k-tok", fpA, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CompleteCharge(ctx, c, h, testRecord(201), time.Hour); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE charges::text LIKE '%' || $1 || '%'`, c.PaymentMethod.Token).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d charge rows hold the payment token", n)
	}
}
