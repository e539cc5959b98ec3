package stripe

import (
	"strings"
	"testing"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewaytest"
)

// Answers as Stripe gives them (trimmed to what matters; Stripe's carry many more fields).
const (
	succeeded       = `{"id":"pi_1","object":"payment_intent","amount":1999,"status":"succeeded","latest_charge":"ch_1"}`
	requiresCapture = `{"id":"pi_1","object":"payment_intent","amount":1999,"status":"requires_capture","latest_charge":"ch_1"}`
	canceled        = `{"id":"pi_1","object":"payment_intent","amount":1999,"status":"canceled","cancellation_reason":null}`
	processing      = `{"id":"pi_1","object":"payment_intent","status":"processing"}`
	requiresAction  = `{"id":"pi_1","object":"payment_intent","status":"requires_action","next_action":{"type":"use_stripe_sdk"}}`
	refusedIntent   = `{"id":"pi_1","object":"payment_intent","status":"requires_payment_method","last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds"}}`
	declined402     = `{"error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline","message":"Your card was declined.","charge":"ch_9","payment_intent":{"id":"pi_9","object":"payment_intent","status":"requires_payment_method"}}}`
	authRequired402 = `{"error":{"type":"card_error","code":"authentication_required","decline_code":"authentication_required","message":"Your card was declined. This transaction requires authentication.","payment_intent":{"id":"pi_9","object":"payment_intent","status":"requires_payment_method"}}}`
	invalid400      = `{"error":{"type":"invalid_request_error","code":"parameter_missing","param":"amount","message":"Missing required param: amount."}}`
	rateLimit429    = `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Request rate limit exceeded."}}`
	lockTimeout429  = `{"error":{"type":"invalid_request_error","code":"lock_timeout","message":"This object cannot be accessed right now because another API request or Stripe process is currently accessing it."}}`
	apiError500     = `{"error":{"type":"api_error","message":"Sorry, something went wrong."}}`

	capturedCharge  = `{"id":"ch_1","object":"charge","amount":2000,"amount_refunded":0,"captured":true,"refunded":false,"status":"succeeded","payment_intent":"pi_1","transfer_group":"ch_x-a1"}`
	authorizedCh    = `{"id":"ch_1","object":"charge","amount":2000,"captured":false,"refunded":false,"status":"succeeded","payment_intent":"pi_1"}`
	releasedCharge  = `{"id":"ch_1","object":"charge","amount":2000,"amount_refunded":2000,"captured":false,"refunded":true,"status":"succeeded","payment_intent":"pi_1"}`
	partialCharge   = `{"id":"ch_1","object":"charge","amount":2000,"amount_refunded":500,"captured":true,"refunded":false,"status":"succeeded","payment_intent":"pi_1"}`
	refundedCharge  = `{"id":"ch_1","object":"charge","amount":2000,"amount_refunded":2000,"captured":true,"refunded":true,"status":"succeeded","payment_intent":"pi_1"}`
	failedCharge    = `{"id":"ch_1","object":"charge","status":"failed","failure_code":"card_declined","outcome":{"reason":"insufficient_funds"},"payment_intent":"pi_1"}`
	pendingCharge   = `{"id":"ch_1","object":"charge","status":"pending","captured":true,"payment_intent":"pi_1"}`
	chargeWithoutPI = `{"id":"ch_1","object":"charge","status":"succeeded","captured":true}`
)

// Content types of the rows.
const (
	js   = gatewaytest.JSON
	text = gatewaytest.Text
	html = gatewaytest.HTML
)

func list(charges ...string) string {
	s := `{"object":"list","url":"/v1/charges","has_more":false,"data":[`
	for i, c := range charges {
		if i > 0 {
			s += ","
		}
		s += c
	}
	return s + `]}`
}

func TestResultOf(t *testing.T) {
	type want gatewaytest.Want
	var (
		ok       = payrouter.OutcomeSucceeded
		declined = payrouter.OutcomeDeclined
		pending  = payrouter.OutcomePending
		unavail  = payrouter.OutcomeUnavailable
		unknown  = payrouter.OutcomeUnknown
		errored  = payrouter.OutcomeError
	)
	cases := []struct {
		name   string
		op     payrouter.Operation
		status int
		ct     string // Content-Type
		body   string
		want   want
	}{
		// Creating and confirming a PaymentIntent.
		{"charge captured", payrouter.OpCharge, 200, js, succeeded, want{ok, payrouter.TxCaptured, "pi_1", "", ""}},
		{"charge authorized only", payrouter.OpCharge, 200, js, requiresCapture, want{ok, payrouter.TxAuthorized, "pi_1", "", ""}},
		{"charge canceled since (a replay)", payrouter.OpCharge, 200, js, canceled, want{ok, payrouter.TxVoided, "pi_1", "", ""}},
		{"charge processing", payrouter.OpCharge, 200, js, processing, want{pending, payrouter.TxPending, "pi_1", "", "processing"}},
		{"charge requires_action: no 3-D Secure here", payrouter.OpCharge, 200, js, requiresAction, want{declined, payrouter.TxDeclined, "pi_1", "authentication_required", "use_stripe_sdk"}},
		{"charge requires_action with no next_action", payrouter.OpCharge, 200, js, `{"id":"pi_1","object":"payment_intent","status":"requires_action"}`, want{declined, payrouter.TxDeclined, "pi_1", "authentication_required", "3-D Secure"}},
		{"charge refused, 200 with last_payment_error", payrouter.OpCharge, 200, js, refusedIntent, want{declined, payrouter.TxDeclined, "pi_1", "insufficient_funds", "card_error"}},
		{"charge refused, last_payment_error with a code only", payrouter.OpCharge, 200, js,
			`{"id":"pi_1","object":"payment_intent","status":"requires_payment_method","last_payment_error":{"type":"card_error","code":"expired_card"}}`,
			want{declined, payrouter.TxDeclined, "pi_1", "expired_card", ""}},
		{"charge requires_payment_method, never attempted", payrouter.OpCharge, 200, js, `{"id":"pi_1","object":"payment_intent","status":"requires_payment_method","last_payment_error":null}`, want{unknown, "", "", "", "requires_payment_method"}},
		{"charge requires_confirmation", payrouter.OpCharge, 200, js, `{"id":"pi_1","object":"payment_intent","status":"requires_confirmation"}`, want{unknown, "", "", "", "requires_confirmation"}},
		{"charge in a status never heard of", payrouter.OpCharge, 200, js, `{"id":"pi_1","object":"payment_intent","status":"mystery"}`, want{unknown, "", "", "", "mystery"}},
		{"charge answered with HTML", payrouter.OpCharge, 200, html, `<html>proxy</html>`, want{unknown, "", "", "", "unreadable"}},
		{"charge answered with {}", payrouter.OpCharge, 200, js, `{}`, want{unknown, "", "", "", "not a PaymentIntent"}},
		{"charge answered with null", payrouter.OpCharge, 200, js, `null`, want{unknown, "", "", "", "not a PaymentIntent"}},
		{"charge answered with nothing", payrouter.OpCharge, 200, "", ``, want{unknown, "", "", "", "unreadable"}},
		{"charge answered with a charge", payrouter.OpCharge, 200, js, capturedCharge, want{unknown, "", "", "", "not a PaymentIntent"}},
		{"charge answered with a PaymentIntent without id", payrouter.OpCharge, 200, js, `{"object":"payment_intent","status":"succeeded"}`, want{unknown, "", "", "", "not a PaymentIntent"}},
		{"charge answered with a status of the wrong type", payrouter.OpCharge, 200, js, `{"id":"pi_1","object":"payment_intent","status":1}`, want{unknown, "", "", "", "unreadable"}},
		// Declines: 402 card_error.
		{"decline", payrouter.OpCharge, 402, js, declined402, want{declined, payrouter.TxDeclined, "pi_9", "generic_decline", "card_error"}},
		{"decline needing authentication", payrouter.OpCharge, 402, js, authRequired402, want{declined, payrouter.TxDeclined, "pi_9", "authentication_required", ""}},
		{"decline without decline_code", payrouter.OpCharge, 402, js, `{"error":{"type":"card_error","code":"expired_card","message":"Your card has expired."}}`, want{declined, payrouter.TxDeclined, "", "expired_card", ""}},
		{"decline without any code", payrouter.OpCharge, 402, js, `{"error":{"type":"card_error"}}`, want{declined, payrouter.TxDeclined, "", "card_declined", ""}},
		{"decline code in camel case", payrouter.OpCharge, 402, js, `{"error":{"type":"card_error","decline_code":"DoNotHonor"}}`, want{declined, payrouter.TxDeclined, "", "do_not_honor", ""}},
		{"402 with an unreadable body", payrouter.OpCharge, 402, text, `Payment Required`, want{unknown, "", "", "", "not Stripe's card_error"}},
		{"402 that is not a card_error", payrouter.OpCharge, 402, js, `{"error":{"type":"invalid_request_error","code":"amount_too_small"}}`, want{unknown, "", "", "", "amount_too_small"}},
		{"402 to a capture", payrouter.OpCapture, 402, js, declined402, want{errored, "", "", "", "card_error"}},
		{"402 to a refund", payrouter.OpRefund, 402, js, `{"error":{"type":"invalid_request_error","code":"balance_insufficient"}}`, want{errored, "", "", "", "balance_insufficient"}},
		// Our requests refused.
		{"invalid request", payrouter.OpCharge, 400, js, invalid400, want{errored, "", "", "", "Missing required param"}},
		{"idempotency_error: the key reused with other parameters", payrouter.OpCharge, 400, js,
			`{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}`,
			want{errored, "", "", "", "idempotency_error"}},
		{"a refused key", payrouter.OpCharge, 401, js, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: sk_test_****1234"}}`, want{errored, "", "", "", "401"}},
		{"a restricted key without the permission", payrouter.OpRefund, 403, js, `{"error":{"type":"invalid_request_error","message":"The provided key does not have the required permissions"}}`, want{errored, "", "", "", "403"}},
		{"no such PaymentIntent", payrouter.OpCapture, 404, js, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"intent"}}`, want{errored, "", "", "", "resource_missing"}},
		{"capture of a canceled PaymentIntent", payrouter.OpCapture, 400, js, `{"error":{"type":"invalid_request_error","code":"payment_intent_unexpected_state"}}`, want{errored, "", "", "", "payment_intent_unexpected_state"}},
		{"the same key while the first is in progress", payrouter.OpCharge, 409, js, `{"error":{"type":"idempotency_error","code":"idempotency_key_in_use"}}`, want{unknown, "", "", "", "in progress"}},
		// Rate limits: only Stripe's own rate_limit answer says nothing was processed.
		{"rate limited", payrouter.OpCharge, 429, js, rateLimit429, want{unavail, "", "", "", "rate limited before processing"}},
		{"rate limited, charset given", payrouter.OpCharge, 429, "application/json; charset=utf-8", rateLimit429, want{unavail, "", "", "", "rate_limit"}},
		{"rate limited look-up", payrouter.OpStatus, 429, js, rateLimit429, want{unavail, "", "", "", ""}},
		{"lock_timeout", payrouter.OpCapture, 429, js, lockTimeout429, want{unknown, "", "", "", "lock_timeout"}},
		{"rate_limit served as text/plain", payrouter.OpCharge, 429, text, rateLimit429, want{unknown, "", "", "", "text/plain"}},
		{"rate_limit with another type", payrouter.OpCharge, 429, js, `{"error":{"type":"api_error","code":"rate_limit"}}`, want{unknown, "", "", "", ""}},
		{"rate_limit naming a PaymentIntent", payrouter.OpCharge, 429, js, `{"error":{"type":"invalid_request_error","code":"rate_limit","payment_intent":{"id":"pi_1"}}}`, want{unknown, "", "", "", ""}},
		{"rate_limit naming a charge", payrouter.OpCharge, 429, js, `{"error":{"type":"invalid_request_error","code":"rate_limit","charge":"ch_1"}}`, want{unknown, "", "", "", ""}},
		{"rate_limit and trailing data", payrouter.OpCharge, 429, js, rateLimit429 + `{}`, want{unknown, "", "", "", ""}},
		{"rate_limit cut short", payrouter.OpCharge, 429, js, rateLimit429[:40], want{unknown, "", "", "", "may have been processed"}},
		{"429 with no body", payrouter.OpCharge, 429, "", ``, want{unknown, "", "", "", "no Content-Type"}},
		// Stripe's own trouble: indeterminate.
		{"500 api_error", payrouter.OpCharge, 500, js, apiError500, want{unknown, "", "", "", "api_error"}},
		{"503 api_error", payrouter.OpCharge, 503, js, apiError500, want{unknown, "", "", "", "503"}},
		{"503 rate_limit (not a 429)", payrouter.OpCharge, 503, js, rateLimit429, want{unknown, "", "", "", "503"}},
		{"503 from envoy after the charge was forwarded", payrouter.OpCharge, 503, "text/plain",
			"upstream connect error or disconnect/reset before headers. reset reason: connection termination", want{unknown, "", "", "", "may have been processed"}},
		{"502 HTML page", payrouter.OpCharge, 502, html, `<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>`, want{unknown, "", "", "", "502"}},
		{"504", payrouter.OpRefund, 504, "", ``, want{unknown, "", "", "", "504"}},
		{"a redirect", payrouter.OpCharge, 302, "", ``, want{unknown, "", "", "", "302"}},
		{"a redirect carrying a PaymentIntent", payrouter.OpCharge, 303, js, succeeded, want{unknown, "", "", "", "not Stripe's answer"}},
		{"a redirect carrying the rate_limit answer", payrouter.OpCharge, 307, js, rateLimit429, want{unknown, "", "", "", "redirect"}},
		// Capture and cancel.
		{"capture", payrouter.OpCapture, 200, js, succeeded, want{ok, payrouter.TxCaptured, "pi_1", "", ""}},
		{"capture still processing", payrouter.OpCapture, 200, js, processing, want{pending, payrouter.TxPending, "pi_1", "", ""}},
		{"capture answered with an uncaptured PaymentIntent", payrouter.OpCapture, 200, js, requiresCapture, want{unknown, "", "", "", "requires_capture"}},
		{"capture answered with a canceled one", payrouter.OpCapture, 200, js, canceled, want{unknown, "", "", "", "canceled"}},
		{"void", payrouter.OpVoid, 200, js, canceled, want{ok, payrouter.TxVoided, "pi_1", "", ""}},
		{"void answered with a captured PaymentIntent", payrouter.OpVoid, 200, js, succeeded, want{unknown, "", "", "", "succeeded"}},
		{"void answered with garbage", payrouter.OpVoid, 200, js, `{"id":`, want{unknown, "", "", "", "unreadable"}},
		// Refunds.
		{"partial refund, charge expanded", payrouter.OpRefund, 200, js,
			`{"id":"re_1","object":"refund","amount":500,"status":"succeeded","charge":` + partialCharge + `}`, want{ok, payrouter.TxPartiallyRefunded, "", "", ""}},
		{"full refund, charge expanded", payrouter.OpRefund, 200, js,
			`{"id":"re_1","object":"refund","amount":2000,"status":"succeeded","charge":` + refundedCharge + `}`, want{ok, payrouter.TxRefunded, "", "", ""}},
		{"refund, expanded charge not captured", payrouter.OpRefund, 200, js,
			`{"id":"re_1","object":"refund","status":"succeeded","charge":` + authorizedCh + `}`, want{ok, payrouter.TxUnknown, "", "", ""}},
		{"refund, charge not expanded", payrouter.OpRefund, 200, js, `{"id":"re_1","object":"refund","status":"succeeded","charge":"ch_1"}`, want{ok, payrouter.TxUnknown, "", "", ""}},
		{"refund, expanded charge unreadable", payrouter.OpRefund, 200, js, `{"id":"re_1","object":"refund","status":"succeeded","charge":{"id":7}}`, want{ok, payrouter.TxUnknown, "", "", ""}},
		{"refund pending", payrouter.OpRefund, 200, js, `{"id":"re_1","object":"refund","status":"pending","charge":"ch_1"}`, want{pending, payrouter.TxUnknown, "", "", "re_1"}},
		{"refund requires_action", payrouter.OpRefund, 200, js, `{"id":"re_1","object":"refund","status":"requires_action","charge":"ch_1"}`, want{pending, payrouter.TxUnknown, "", "", ""}},
		{"refund failed", payrouter.OpRefund, 200, js, `{"id":"re_1","object":"refund","status":"failed","charge":"ch_1"}`, want{errored, "", "", "", "failed"}},
		{"refund canceled", payrouter.OpRefund, 200, js, `{"id":"re_1","object":"refund","status":"canceled","charge":"ch_1"}`, want{errored, "", "", "", "canceled"}},
		{"refund in a status never heard of", payrouter.OpRefund, 200, js, `{"id":"re_1","object":"refund","status":"odd"}`, want{unknown, "", "", "", "odd"}},
		{"refund with no status", payrouter.OpRefund, 200, js, `{"id":"re_1","object":"refund","status":null}`, want{unknown, "", "", "", ""}},
		{"refund answered with a PaymentIntent", payrouter.OpRefund, 200, js, succeeded, want{unknown, "", "", "", "not a refund"}},
		// The look-up: the charges of a transfer_group.
		{"status: nothing found", payrouter.OpStatus, 200, js, list(), want{ok, payrouter.TxNotFound, "", "", ""}},
		{"status: captured", payrouter.OpStatus, 200, js, list(capturedCharge), want{ok, payrouter.TxCaptured, "pi_1", "", ""}},
		{"status: authorized", payrouter.OpStatus, 200, js, list(authorizedCh), want{ok, payrouter.TxAuthorized, "pi_1", "", ""}},
		{"status: released (canceled)", payrouter.OpStatus, 200, js, list(releasedCharge), want{ok, payrouter.TxVoided, "pi_1", "", ""}},
		{"status: partially refunded", payrouter.OpStatus, 200, js, list(partialCharge), want{ok, payrouter.TxPartiallyRefunded, "pi_1", "", ""}},
		{"status: refunded", payrouter.OpStatus, 200, js, list(refundedCharge), want{ok, payrouter.TxRefunded, "pi_1", "", ""}},
		{"status: declined", payrouter.OpStatus, 200, js, list(failedCharge), want{ok, payrouter.TxDeclined, "pi_1", "insufficient_funds", ""}},
		{"status: pending", payrouter.OpStatus, 200, js, list(pendingCharge), want{ok, payrouter.TxPending, "pi_1", "", ""}},
		{"status: the newest of two", payrouter.OpStatus, 200, js, list(capturedCharge, failedCharge), want{ok, payrouter.TxCaptured, "pi_1", "", ""}},
		{"status: a charge of no PaymentIntent", payrouter.OpStatus, 200, js, list(chargeWithoutPI), want{unknown, "", "", "", "unreadable"}},
		{"status: a charge in a status never heard of", payrouter.OpStatus, 200, js, list(`{"id":"ch_1","object":"charge","status":"odd","payment_intent":"pi_1"}`), want{unknown, "", "", "", "odd"}},
		{"status: an empty charge", payrouter.OpStatus, 200, js, list(`{}`), want{unknown, "", "", "", ""}},
		{"status: not a list", payrouter.OpStatus, 200, js, capturedCharge, want{unknown, "", "", "", "not a list"}},
		{"status: a list without data", payrouter.OpStatus, 200, js, `{"object":"list","has_more":false}`, want{unknown, "", "", "", "not a list"}},
		{"status: a list whose data is null", payrouter.OpStatus, 200, js, `{"object":"list","data":null}`, want{unknown, "", "", "", "not a list"}},
		{"status: data of the wrong type", payrouter.OpStatus, 200, js, `{"object":"list","data":{}}`, want{unknown, "", "", "", "unreadable"}},
		{"status: 500", payrouter.OpStatus, 500, "", ``, want{unknown, "", "", "", ""}},
		{"status: 503 from envoy", payrouter.OpStatus, 503, "text/plain", "upstream connect error or disconnect/reset before headers. reset reason: connection termination", want{unknown, "", "", "", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gatewaytest.CheckMapping(t, resultOf, c.op, c.status, c.ct, c.body, gatewaytest.Want(c.want))
		})
	}
}

// TestForeignAnswers: what a proxy or a redirect answers in Stripe's place is unknown, whatever
// the operation.
func TestForeignAnswers(t *testing.T) { gatewaytest.CheckForeignAnswers(t, resultOf) }

func TestLatestChargeGroup(t *testing.T) {
	cases := []struct {
		name, body, id, group string
		ok                    bool
	}{
		{"expanded, with the group", `{"id":"pi_1","object":"payment_intent","latest_charge":{"id":"ch_1","object":"charge","transfer_group":"ref-a1"}}`, "ch_1", "ref-a1", true},
		{"expanded, group null", `{"id":"pi_1","object":"payment_intent","latest_charge":{"id":"ch_1","object":"charge","transfer_group":null}}`, "ch_1", "", true},
		{"expanded, no group field", `{"id":"pi_1","object":"payment_intent","latest_charge":{"id":"ch_1","object":"charge"}}`, "ch_1", "", true},
		{"not expanded", `{"id":"pi_1","object":"payment_intent","latest_charge":"ch_1"}`, "", "", false},
		{"no charge yet", `{"id":"pi_1","object":"payment_intent","latest_charge":null}`, "", "", false},
		{"not a charge", `{"id":"pi_1","object":"payment_intent","latest_charge":{"id":"re_1","object":"refund"}}`, "", "", false},
		{"unreadable", `{"id":`, "", "", false},
	}
	for _, c := range cases {
		id, group, ok := latestChargeGroup([]byte(c.body))
		if id != c.id || group != c.group || ok != c.ok {
			t.Errorf("%s: latestChargeGroup = %q, %q, %v; want %q, %q, %v", c.name, id, group, ok, c.id, c.group, c.ok)
		}
	}
}

func TestCheckAPIVersion(t *testing.T) {
	for _, v := range []string{TestedAPIVersion, MinAPIVersion, "2025-08-27.basil", "2024-06-20"} {
		if err := CheckAPIVersion(v); err != nil {
			t.Errorf("CheckAPIVersion(%q) = %v, want nil", v, err)
		}
	}
	for v, want := range map[string]string{
		"":                  "api_version is required",
		"2022-08-01":        "older than 2022-11-15",
		"2020-08-27":        "older than",
		"latest":            "not a Stripe API version",
		"2025-08-27.Basil":  "not a Stripe API version",
		"2025-8-27":         "not a Stripe API version",
		"2025-08-27.basil ": "not a Stripe API version",
	} {
		err := CheckAPIVersion(v)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckAPIVersion(%q) = %v, want an error saying %q", v, err, want)
		}
	}
}

// FuzzParseAnswer: whatever Stripe (or anything in its place) answers, the parser neither panics
// nor gives a result that is not a valid one.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []struct {
		status int
		ct     string
		body   string
	}{
		{200, js, succeeded}, {200, js, requiresCapture}, {200, js, canceled}, {200, js, processing},
		{200, js, requiresAction}, {200, js, refusedIntent},
		{200, js, list(capturedCharge)}, {200, js, list()}, {200, js, list(failedCharge, releasedCharge)},
		{200, js, `{"id":"re_1","object":"refund","status":"succeeded","charge":` + partialCharge + `}`},
		{402, js, declined402}, {402, js, authRequired402}, {400, js, invalid400},
		{429, js, rateLimit429}, {429, js, lockTimeout429}, {429, text, rateLimit429},
		{500, js, apiError500}, {500, "", ``}, {409, js, `{}`}, {200, js, `null`}, {200, js, `[]`},
	} {
		gatewaytest.AddSeed(f, s.status, s.ct, s.body)
	}
	gatewaytest.FuzzMapping(f, resultOf)
}
