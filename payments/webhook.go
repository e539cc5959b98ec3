package payments

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/payrouter/payrouter"
)

// Gateway webhooks in (docs/webhooks.md, Gateway webhooks in): a gateway calls back when a
// transaction it answered pending is final. The call is verified by the gateway's adapter with
// the secrets configured for it, and then it is only a hint: the charge it names is looked up at
// the gateway, exactly as the reconciler would look it up (ResolveProcessing), and the look-up
// decides, under the same version-checked write. So a forged status changes nothing, a duplicate
// or a late event finds the charge final and changes nothing, and an event that arrives while
// the charge's own request still runs races it safely: whichever write comes second finds the
// charge moved on and takes it as it stands (storeResolved, complete).

// WebhookResult is what a verified gateway webhook came to.
type WebhookResult string

// The results of Service.GatewayWebhook.
const (
	// WebhookSettled: the look-up moved the charge on (or released a late approval).
	WebhookSettled WebhookResult = "settled"
	// WebhookUnchanged: verified, and nothing to change: the charge is final already (a
	// duplicate, a late event), still pending at the gateway, not known, or held elsewhere.
	WebhookUnchanged WebhookResult = "unchanged"
	// WebhookIgnored: verified, an event that says nothing final (created, processing, a type
	// payrouter does not act on).
	WebhookIgnored WebhookResult = "ignored"
)

// ErrNoWebhook is the answer for a gateway with no webhook configured (or none by that name):
// its calls are refused before anything is read.
var ErrNoWebhook = payrouter.Errorf(payrouter.ENotFound, "no webhook is configured for this gateway")

// SetWebhookKeys makes keys the gateways' webhook keys, by gateway name (gateways.<name>.webhook);
// a gateway not in it has no webhook. A reload calls it.
func (s *Service) SetWebhookKeys(keys map[string]payrouter.WebhookKeys) {
	k := maps.Clone(keys)
	s.hooks.Store(&k)
}

// HasWebhook reports whether gateway has a webhook configured.
func (s *Service) HasWebhook(gateway string) bool {
	_, _, ok := s.webhookOf(gateway)
	return ok
}

// webhookOf returns the verifier and keys of gateway's webhook.
func (s *Service) webhookOf(gateway string) (payrouter.WebhookVerifier, payrouter.WebhookKeys, bool) {
	hooks := s.hooks.Load()
	if hooks == nil {
		return nil, payrouter.WebhookKeys{}, false
	}
	keys, ok := (*hooks)[gateway]
	if !ok {
		return nil, payrouter.WebhookKeys{}, false
	}
	v, ok := s.table().gw.Adapters[gateway].(payrouter.WebhookVerifier)
	return v, keys, ok
}

// GatewayWebhook takes a gateway's webhook call (POST /webhooks/{gateway}): it verifies it with the
// gateway's adapter and keys, and settles the charge the event names (settleEvent). It returns
// ErrNoWebhook for a gateway without a webhook; an error wrapping payrouter.ErrWebhookSignature
// or payrouter.ErrWebhookForm for a call that does not verify or does not parse (nothing is
// read or changed); another error when the store failed (the gateway should send it again).
func (s *Service) GatewayWebhook(ctx context.Context, gateway string, header http.Header, body []byte) (WebhookResult, payrouter.GatewayEvent, error) {
	v, keys, ok := s.webhookOf(gateway)
	if !ok {
		return "", payrouter.GatewayEvent{}, ErrNoWebhook
	}
	ev, err := v.VerifyWebhook(header, body, keys, s.now())
	if err != nil {
		return "", payrouter.GatewayEvent{}, err
	}
	res, err := s.settleEvent(ctx, gateway, ev)
	return res, ev, err
}

// settleEvent runs what a verified event of gateway names through the reconciler's transition:
// a processing charge whose current attempt it names is looked up and moved on; an attempt its
// charge no longer keeps (a late approval after a failover) is released as the queued recheck
// would release it; anything else changes nothing.
func (s *Service) settleEvent(ctx context.Context, gateway string, ev payrouter.GatewayEvent) (WebhookResult, error) {
	if !ev.Settles {
		return WebhookIgnored, nil
	}
	chargeID, _, ok := payrouter.ChargeOfReference(ev.Reference)
	if !ok {
		return WebhookUnchanged, nil // not a reference payrouter sent
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	c, err := s.charges.Charge(ctx, chargeID)
	switch {
	case errors.Is(err, payrouter.ErrNotFound):
		return WebhookUnchanged, nil
	case err != nil:
		return "", fmt.Errorf("reading charge %s: %w", chargeID, err)
	}
	i := slices.IndexFunc(c.Attempts, func(a payrouter.Attempt) bool { return a.Gateway == gateway && a.Reference == ev.Reference })
	current := c.Gateway == gateway && c.Reference == ev.Reference
	switch {
	case current && c.Status == payrouter.StatusProcessing:
		before := c.Status
		answered, err := s.ResolveProcessing(ctx, c)
		if err != nil {
			return "", err
		}
		if !answered || c.Status == before {
			return WebhookUnchanged, nil
		}
		took := s.now().Sub(c.CreatedAt)
		s.log.InfoContext(ctx, "charge.settled_by_webhook", "charge_id", c.ID, "gateway", gateway, "event", ev.Type, "event_id", ev.ID,
			"status", c.Status, "took_ms", took.Milliseconds())
		return WebhookSettled, nil
	case current, i < 0, c.Status == payrouter.StatusProcessing:
		// Final already (a duplicate, a late event); an attempt the charge never made; or an
		// earlier attempt of a charge still being decided, whose queued recheck releases it once
		// the charge is decided.
		return WebhookUnchanged, nil
	case c.Attempts[i].Voided:
		return WebhookUnchanged, nil // released already
	}
	// An attempt the charge does not keep: whatever the gateway holds for it is released now.
	t := payrouter.Task{
		Kind: payrouter.TaskRecheck, Gateway: gateway, ChargeID: c.ID, Reference: ev.Reference, GatewayReference: ev.GatewayReference,
		Amount: c.Amount, Currency: c.Currency, CreatedAt: c.CreatedAt,
	}
	if err := s.release(ctx, t); err != nil {
		// Not now (still pending there, the gateway away): the recheck queued when the attempt
		// was given up goes on looking.
		s.log.InfoContext(ctx, "charge.release_later", "charge_id", c.ID, "gateway", gateway, "reference", ev.Reference, "err", err)
		return WebhookUnchanged, nil
	}
	if after, err := s.charges.Charge(ctx, chargeID); err == nil {
		if j := slices.IndexFunc(after.Attempts, func(a payrouter.Attempt) bool { return a.Gateway == gateway && a.Reference == ev.Reference }); j >= 0 && after.Attempts[j].Voided {
			return WebhookSettled, nil
		}
	}
	return WebhookUnchanged, nil
}
