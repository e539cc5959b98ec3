package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/internal/testlog"
	"github.com/payrouter/payrouter/telemetry"
	"github.com/payrouter/payrouter/webhooks"
)

// fakeWebhooks is the webhooks' state as the admin API sees it: one endpoint, disabled, and one
// dead letter.
type fakeWebhooks struct {
	endpoint webhooks.EndpointState
	dead     map[string]payrouter.DeadLetter
}

func (f *fakeWebhooks) Endpoints(context.Context) ([]webhooks.EndpointState, error) {
	return []webhooks.EndpointState{f.endpoint}, nil
}

func (f *fakeWebhooks) DeadLetters(context.Context, int) ([]payrouter.DeadLetter, error) {
	var out []payrouter.DeadLetter
	for _, d := range f.dead {
		out = append(out, d)
	}
	return out, nil
}

func (f *fakeWebhooks) Backlog(context.Context) (int64, int64, error) {
	return 3, int64(len(f.dead)), nil
}

func (f *fakeWebhooks) Redeliver(_ context.Context, delivery string) (*payrouter.Task, error) {
	d, ok := f.dead[delivery]
	if !ok {
		return nil, fmt.Errorf("dead letter %s: %w", delivery, payrouter.ErrNotFound)
	}
	delete(f.dead, delivery)
	t := d.Task
	w := *t.Webhook
	w.Attempt = 1
	t.Webhook = &w
	return &t, nil
}

func (f *fakeWebhooks) EnableEndpoint(_ context.Context, name string) (webhooks.EndpointState, error) {
	if name != f.endpoint.Endpoint.Name {
		return webhooks.EndpointState{}, fmt.Errorf("no %s: %w", name, payrouter.ErrNotFound)
	}
	f.endpoint.Disabled = nil
	return f.endpoint, nil
}

// TestWebhooksAdmin: GET /admin/webhooks shows the endpoint without its secrets or its URL's
// token, its state and the dead letters; redeliver and enable act once, are audited with what
// they acted on, and answer 404 for what does not exist.
func TestWebhooksAdmin(t *testing.T) {
	secret := "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	delivery := payrouter.WebhookDeliveryID("shop", "evt_ONE")
	fake := &fakeWebhooks{
		endpoint: webhooks.EndpointState{
			Endpoint: webhooks.Endpoint{Name: "shop", URL: "https://shop.example/hooks?token=t0ken", KeyName: "shop-eu",
				Events: []string{"*"}, Secrets: []string{secret}, Timeout: 10 * time.Second, MaxConcurrent: 10},
			Disabled: &payrouter.WebhookDisabled{URL: "https://shop.example/hooks?token=t0ken", Reason: "answered 410 Gone", At: time.Now()},
		},
		dead: map[string]payrouter.DeadLetter{delivery: {
			Task: payrouter.Task{Kind: payrouter.TaskWebhook, Webhook: &payrouter.WebhookDelivery{
				ID: delivery, Endpoint: "shop", EventID: "evt_ONE", EventType: payrouter.EventChargeSucceeded, Attempt: 8,
				LastStatus: 500, LastError: "answered 500 Internal Server Error"}},
			Reason: "the last of 8 attempts failed", At: time.Now(),
		}},
	}
	logs := &testlog.Buffer{}
	h := NewAdminServer(Deps{
		Credentials: NewAuthCredentials(config.Auth{AdminToken: "admin-token"}), Webhooks: fake,
		Metrics: telemetry.NewMetrics(), Log: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	admin := []string{"Authorization", "Bearer admin-token"}

	r := do(h, "GET", "/admin/webhooks", "", admin...)
	if r.status != 200 || strings.Contains(r.body, secret) || strings.Contains(r.body, "t0ken") {
		t.Fatalf("GET /admin/webhooks: %d %s", r.status, r.body)
	}
	var view struct {
		Endpoints []struct {
			Name, State string
			Secrets     int
			Disabled    *struct{ Reason string }
		}
		DeadLetters []struct {
			Delivery, Reason, Status string
			LastStatus               *int `json:"last_status"`
		} `json:"dead_letters"`
		Backlog struct {
			Queued      int64
			DeadLetters int64 `json:"dead_letters"`
		} `json:"backlog"`
	}
	if err := json.Unmarshal([]byte(r.body), &view); err != nil {
		t.Fatal(err)
	}
	if len(view.Endpoints) != 1 || view.Endpoints[0].State != "disabled" || view.Endpoints[0].Secrets != 1 ||
		view.Endpoints[0].Disabled == nil || view.Endpoints[0].Disabled.Reason != "answered 410 Gone" {
		t.Errorf("endpoints: %+v", view.Endpoints)
	}
	if len(view.DeadLetters) != 1 || view.DeadLetters[0].Delivery != delivery || view.DeadLetters[0].Status != "dead_letter" ||
		view.DeadLetters[0].LastStatus == nil || *view.DeadLetters[0].LastStatus != 500 {
		t.Errorf("dead letters: %+v", view.DeadLetters)
	}
	if view.Backlog.Queued != 3 || view.Backlog.DeadLetters != 1 {
		t.Errorf("backlog: %+v", view.Backlog)
	}

	if r := do(h, "POST", "/admin/webhooks/"+delivery+"/redeliver", "", admin...); r.status != 202 || !strings.Contains(r.body, `"status":"queued"`) || !strings.Contains(r.body, `"attempt":1`) {
		t.Errorf("redeliver: %d %s", r.status, r.body)
	}
	if r := do(h, "POST", "/admin/webhooks/"+delivery+"/redeliver", "", admin...); r.status != 404 {
		t.Errorf("redeliver again: %d %s, want 404", r.status, r.body)
	}
	if r := do(h, "POST", "/admin/webhooks/4111111111111111/redeliver", "", admin...); r.status != 404 || strings.Contains(r.body, "4111111111111111") {
		t.Errorf("redeliver of a card number: %d %s, want 404 without it", r.status, r.body)
	}
	if r := do(h, "POST", "/admin/webhooks/endpoints/shop/enable", "", admin...); r.status != 200 || !strings.Contains(r.body, `"state":"enabled"`) {
		t.Errorf("enable: %d %s", r.status, r.body)
	}
	if r := do(h, "POST", "/admin/webhooks/endpoints/nope/enable", "", admin...); r.status != 404 {
		t.Errorf("enable an unknown endpoint: %d %s", r.status, r.body)
	}
	if r := do(h, "POST", "/admin/webhooks/endpoints/shop/enable", ""); r.status != 401 {
		t.Errorf("enable without the token: %d", r.status)
	}

	want := []map[string]any{
		{"action": "webhook.redeliver", "actor": "admin:admin", "delivery": delivery, "status": 202.0, "result": "ok"},
		{"action": "webhook.redeliver", "actor": "admin:admin", "delivery": delivery, "status": 404.0, "result": "not-found"},
		{"action": "webhook.redeliver", "actor": "admin:admin", "status": 404.0, "result": "not-found"},
		{"action": "webhook.enable", "actor": "admin:admin", "endpoint": "shop", "status": 200.0, "result": "ok"},
		{"action": "webhook.enable", "actor": "admin:admin", "status": 404.0, "result": "not-found"},
	}
	got := logs.Named(t, "audit")
	if len(got) != len(want) {
		t.Fatalf("%d audit lines, want %d:\n%s", len(got), len(want), logs.String())
	}
	for i, w := range want {
		for k, v := range w {
			if got[i][k] != v {
				t.Errorf("audit line %d: %s = %v, want %v: %v", i, k, got[i][k], v, got[i])
			}
		}
	}
	if strings.Contains(logs.String(), "4111111111111111") {
		t.Error("a path that is no delivery id reached the log")
	}
}
