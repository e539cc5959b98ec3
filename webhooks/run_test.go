package webhooks

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/memstore"
)

// TestRunDispatchesEveryPoll: two instances' dispatchers polling one store queue each new event
// once, within a poll interval of its being written, and stop with their context.
func TestRunDispatchesEveryPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		settings := Settings{Endpoints: []Endpoint{endpointAt("shop", "http://127.0.0.1:1/hooks")}, AllowPrivate: true,
			PollInterval: time.Second}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for range 2 {
			svc := New(Config{Store: store, Render: renderEvent})
			if err := svc.Update(settings, func(Endpoint) string { return shopScope }); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { svc.Run(ctx) })
		}
		synctest.Wait() // both have polled once: the cursor is at the end of the feed
		for i := range 30 {
			c := &payrouter.Charge{ID: fmt.Sprintf("ch_%02d", i), Status: payrouter.StatusSucceeded, Amount: 100, Currency: "USD",
				Owner: shopScope, CreatedAt: time.Now()}
			if err := store.SaveCharge(t.Context(), c); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(1100 * time.Millisecond) // one poll interval and its jitter, on the bubble's clock
		synctest.Wait()
		seen := map[string]int{}
		for _, task := range store.Tasks() {
			seen[task.Webhook.EventID]++
		}
		if len(seen) != 30 {
			t.Errorf("%d events queued after a poll interval, want 30", len(seen))
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("event %s queued %d times, want once", id, n)
			}
		}
		cancel()
		wg.Wait()
	})
}
