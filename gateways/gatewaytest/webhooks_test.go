package gatewaytest_test

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/internal/memnet"
)

// TestPendingThenCallBack: with the behavior pending, each adapter that has webhooks gets a
// charge answered pending from its fake, a look-up pending until the fake decides, then final;
// and the fake's call back, over HTTP, verifies with the adapter (payrouter.WebhookVerifier)
// and names the charge's reference, saying it settles. The fake signs and the adapter verifies
// with code of their own, each from the documented scheme.
func TestPendingThenCallBack(t *testing.T) {
	for _, a := range adapters {
		if a.Name == "paywell" {
			continue // no pending answer, no webhooks
		}
		t.Run(a.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				network := &memnet.Network{}
				srv := a.NewServer()
				url := network.Serve(t, "gateway", srv)
				t.Cleanup(srv.Close)
				srv.SetCallbackTransport(network.Transport())

				var (
					mu    sync.Mutex
					calls []struct {
						header http.Header
						body   []byte
					}
				)
				hook := network.Serve(t, "payrouter", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					body, _ := io.ReadAll(r.Body)
					mu.Lock()
					calls = append(calls, struct {
						header http.Header
						body   []byte
					}{r.Header.Clone(), body})
					mu.Unlock()
				}))
				const secret = "whsec_conformance_secret_0123456789"
				srv.SetCallback(simCallback(hook+"/webhooks/"+a.Name, secret))
				b := srv.Behavior()
				b.Pending = 2 * time.Second
				srv.SetBehavior(b)

				gw, err := a.NewClient(url, gatewayhttp.NewClient(network.Transport()))
				if err != nil {
					t.Fatal(err)
				}
				ctx := t.Context()
				ref := "ch_conformance-a1"
				res := gw.Authorize(ctx, payrouter.ChargeRequest{Reference: ref, Amount: 1500, Currency: "USD", Token: "tok_visa", Capture: true})
				if res.Outcome != payrouter.OutcomePending {
					t.Fatalf("a charge while pending is set: %s (%s); want pending", res.Outcome, res.Detail)
				}
				look := payrouter.TxRequest{Reference: ref, ChargeReference: ref, GatewayReference: res.GatewayReference, Amount: 1500, Currency: "USD"}
				if got := gw.Status(ctx, look); got.State != payrouter.TxPending {
					t.Fatalf("its look-up before the fake decides: %s %s; want pending", got.Outcome, got.State)
				}
				time.Sleep(3 * time.Second)
				synctest.Wait()
				if got := gw.Status(ctx, look); got.State != payrouter.TxCaptured {
					t.Fatalf("its look-up once decided: %s %s; want captured", got.Outcome, got.State)
				}

				v, ok := gw.(payrouter.WebhookVerifier)
				if !ok {
					t.Fatalf("%s has no VerifyWebhook", a.Name)
				}
				keys := payrouter.WebhookKeys{Secrets: []string{"whsec_old_0123456789", secret}, Tolerance: 5 * time.Minute}
				mu.Lock()
				defer mu.Unlock()
				var settling []payrouter.GatewayEvent
				for _, c := range calls {
					ev, err := v.VerifyWebhook(c.header, c.body, keys, time.Now())
					if err != nil {
						t.Fatalf("a call back does not verify: %v\n%s", err, c.body)
					}
					if ev.Settles {
						settling = append(settling, ev)
					}
					if _, err := v.VerifyWebhook(c.header, c.body, payrouter.WebhookKeys{Secrets: []string{"whsec_other"}, Tolerance: 5 * time.Minute}, time.Now()); err == nil {
						t.Error("a call back verifies with another secret")
					}
					if _, err := v.VerifyWebhook(c.header, c.body, keys, time.Now().Add(10*time.Minute)); err == nil {
						t.Error("a call back verifies 10 minutes later")
					}
				}
				if len(settling) != 1 || settling[0].Reference != ref || !slices.ContainsFunc([]string{res.GatewayReference}, func(s string) bool { return s == "" || s == settling[0].GatewayReference }) {
					t.Errorf("settling events %+v; want one naming %s (and %q)", settling, ref, res.GatewayReference)
				}
				if st := srv.CallbackStats(); st.Delivered != int64(len(calls)) || st.Failed != 0 || !strings.HasSuffix(st.URL, "/webhooks/"+a.Name) {
					t.Errorf("callback stats %+v after %d calls", st, len(calls))
				}
			})
		})
	}
}

func simCallback(url, secret string) sim.Callback { return sim.Callback{URL: url, Secret: secret} }
