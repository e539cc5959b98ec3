package pgstore

import (
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// TestWebhookCursorSurvivesRestart: an endpoint's place in the event feed is the database's, so
// an instance started after another stopped goes on from where the other left off: nothing sent
// twice by the cursor, nothing skipped.
func TestWebhookCursorSurvivesRestart(t *testing.T) {
	url := pgtest.NewDatabase(t)
	first := open(t, url, Options{})
	save := func(s *Store, id string) {
		t.Helper()
		c := &payrouter.Charge{ID: id, Status: payrouter.StatusProcessing, Amount: 100, Currency: "USD", Owner: "name:shop", CreatedAt: time.Now()}
		if err := s.SaveCharge(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		c.Status = payrouter.StatusSucceeded
		if err := s.SaveCharge(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := first.WebhookEvents(t.Context(), "shop", "name:shop", 10); err != nil {
		t.Fatal(err)
	}
	save(first, "ch_1")
	save(first, "ch_2")
	page, err := first.WebhookEvents(t.Context(), "shop", "name:shop", 1)
	if err != nil || len(page.Events) != 1 || page.Events[0].Charge.ID != "ch_1" {
		t.Fatalf("first page = %+v, %v; want ch_1", page, err)
	}
	if err := first.AdvanceWebhook(t.Context(), "shop", page.From, page.To, nil); err != nil {
		t.Fatal(err)
	}
	first.Close()

	second := open(t, url, Options{})
	next, err := second.WebhookEvents(t.Context(), "shop", "name:shop", 10)
	if err != nil {
		t.Fatal(err)
	}
	if next.From != page.To || len(next.Events) != 1 || next.Events[0].Charge.ID != "ch_2" {
		t.Fatalf("after a restart: from %s, %d events; want from %s, ch_2 alone", next.From, len(next.Events), page.To)
	}
}
