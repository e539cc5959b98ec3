// Package stripesim is a fake Stripe: the part of the PaymentIntents API that payrouter's stripe
// adapter uses, on Stripe's own wire (form-encoded requests, JSON answers, Stripe's objects and
// error forms, Idempotency-Key with Stripe's replay rules), over the shared simulator in package
// sim, so that its behaviour modes (declines, outages, latency, hang, reset, process-then-hang)
// apply. stripe-mock holds its answers and the adapter's requests to Stripe's OpenAPI
// specification (gateways/stripe/stripemock_test.go), so the fake cannot drift from Stripe.
//
//	POST /v1/payment_intents                 create and confirm (confirm=true only)
//	GET  /v1/payment_intents/{intent}        one PaymentIntent
//	POST /v1/payment_intents/{intent}/capture amount_to_capture (optional)
//	POST /v1/payment_intents/{intent}/cancel  release an uncaptured PaymentIntent
//	POST /v1/refunds                         payment_intent, amount (optional)
//	GET  /v1/charges                         transfer_group, payment_intent, limit: newest first
//	GET  /v1/payment_intents                 an empty list: the adapter's health call, answered
//	                                         as GET /health is (sim.Server.HandleHealth)
//
// As Stripe does, it names a PaymentIntent only by its id (never by the Idempotency-Key it was
// created with), refuses a parameter it does not know ("Received unknown parameter"), saves the
// first answer to an Idempotency-Key once the endpoint began (a refused parameter is not saved)
// and replays it to a repeat with the same parameters, refuses the key with other parameters
// (400 idempotency_error) and while its first request is in progress (409
// idempotency_key_in_use). Its "not processed, retry later" form (mode unavailable) is Stripe's
// rate limit: 429, invalid_request_error, code rate_limit.
//
// Payment methods: tok_decline (the simulators' decline token) and pm_card_chargeDeclined are
// declined with generic_decline, pm_card_chargeDeclinedInsufficientFunds with
// insufficient_funds, pm_card_authenticationRequired needs 3-D Secure (declined
// authentication_required with error_on_requires_action, else left requires_action); anything
// else approves.
package stripesim

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/payrouter/payrouter/gateways/sim"
)

// DeclineCode is the decline_code of the simulators' decline token and of decline_all.
const DeclineCode = "generic_decline"

// declines are Stripe's test payment methods that are declined, with their decline codes.
var declines = map[string]string{
	sim.DeclineToken:                          DeclineCode,
	"pm_card_chargeDeclined":                  DeclineCode,
	"pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
}

// AuthenticationRequired is Stripe's test payment method whose payments need 3-D Secure.
const AuthenticationRequired = "pm_card_authenticationRequired"

// New returns a fake Stripe in normal mode with an empty ledger.
func New() *sim.Server {
	f := &fake{}
	f.reset()
	s := sim.New(sim.Config{Name: "stripe", TxPrefix: "pi_", OpPrefix: "re_", Unavailable: rateLimited, OnReset: f.reset, OnSettle: f.settled})
	f.s = s
	s.Handle("POST /v1/payment_intents", f.endpoint(createParams, f.createIntent))
	s.Handle("GET /v1/payment_intents/{intent}", f.endpoint(retrieveParams, f.retrieveIntent))
	s.Handle("POST /v1/payment_intents/{intent}/capture", f.endpoint(captureParams, f.captureIntent))
	s.Handle("POST /v1/payment_intents/{intent}/cancel", f.endpoint(cancelParams, f.cancelIntent))
	s.Handle("POST /v1/refunds", f.endpoint(refundParams, f.createRefund))
	s.Handle("GET /v1/charges", f.endpoint(listChargeParams, f.listCharges))
	s.HandleHealth("GET /v1/payment_intents", f.listIntents)
	return s
}

// fake is what stripesim keeps beside the ledger: what a PaymentIntent was created with, and the
// answers saved under Idempotency-Keys. Reset (sim.Config.OnReset) empties it.
type fake struct {
	s *sim.Server

	mu      sync.Mutex
	intents map[string]*intent  // by PaymentIntent id
	byGroup map[string][]string // transfer_group -> PaymentIntent ids, oldest first
	order   []string            // every PaymentIntent id, oldest first
	keys    map[string]*saved   // Idempotency-Key -> the first answer
	events  int64               // events sent, for their ids; never reset
}

func (f *fake) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.intents, f.byGroup, f.order, f.keys = map[string]*intent{}, map[string][]string{}, nil, map[string]*saved{}
}

// intent is what the ledger does not keep of a PaymentIntent.
type intent struct {
	created       int64
	captureMethod string
	paymentMethod string
	transferGroup string
	description   string
	metadata      map[string]string
	// requiresAction: left waiting for 3-D Secure (no charge was made).
	requiresAction bool
	// errorCode is last_payment_error's code of a refused one (card_declined,
	// authentication_required).
	errorCode  string
	canceledAt int64
}

// saved is the answer saved under an Idempotency-Key.
type saved struct {
	fingerprint string // the endpoint and parameters of the first request
	inProgress  bool
	status      int
	body        []byte
}

// answer is what an endpoint answers: a status and a JSON body. keep is false for the answers
// Stripe does not save under an Idempotency-Key (its endpoint never began: a parameter refused).
type answer struct {
	status int
	body   any
	keep   bool
}

func ok(body any) answer { return answer{http.StatusOK, body, true} }

// apiError is Stripe's error object.
type apiError struct {
	Type          string    `json:"type"`
	Code          string    `json:"code,omitempty"`
	DeclineCode   string    `json:"decline_code,omitempty"`
	Message       string    `json:"message"`
	Param         string    `json:"param,omitempty"`
	Charge        string    `json:"charge,omitempty"`
	PaymentIntent *piObject `json:"payment_intent,omitempty"`
	DocURL        string    `json:"doc_url,omitempty"`
}

func failure(status int, e apiError, keep bool) answer {
	if e.Code != "" {
		e.DocURL = "https://docs.stripe.com/error-codes/" + strings.ReplaceAll(e.Code, "_", "-")
	}
	return answer{status, map[string]apiError{"error": e}, keep}
}

// invalidParam refuses a parameter before the endpoint begins: not saved under the key.
func invalidParam(param, code, msg string) answer {
	return failure(http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: code, Param: param, Message: msg}, false)
}

// rateLimited is Stripe's rate limit, the one answer it documents as unprocessed (its limiters run
// before its API): mode unavailable's answer.
func rateLimited(w http.ResponseWriter, _ *http.Request) {
	a := failure(http.StatusTooManyRequests, apiError{Type: "invalid_request_error", Code: "rate_limit",
		Message: "Request rate limit exceeded. Learn more about rate limits here https://docs.stripe.com/rate-limits."}, false)
	sim.WriteJSON(w, a.status, a.body)
}

// params lists the parameters an endpoint takes: a name, or a name ending in "[" for a family
// (metadata[key], expand[0]).
type params []string

func (p params) allows(key string) bool {
	for _, a := range p {
		if key == a || strings.HasSuffix(a, "[") && strings.HasPrefix(key, a) && strings.HasSuffix(key, "]") {
			return true
		}
	}
	return false
}

var (
	createParams     = params{"amount", "currency", "payment_method", "payment_method_types[", "confirm", "capture_method", "error_on_requires_action", "transfer_group", "description", "metadata[", "expand["}
	retrieveParams   = params{"expand["}
	captureParams    = params{"amount_to_capture", "metadata[", "expand["}
	cancelParams     = params{"cancellation_reason", "expand["}
	refundParams     = params{"payment_intent", "amount", "reason", "metadata[", "expand["}
	listChargeParams = params{"transfer_group", "payment_intent", "limit"}
	listIntentParams = params{"limit", "created[", "created"}
)

// apiVersionForm is what Stripe-Version may hold.
var apiVersionForm = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(\.[a-z]+)?$`)

// endpoint is what every API call goes through before its handler, as at Stripe: the key, the
// version, the parameters (the body of a POST, the query of a GET) checked against what the
// endpoint takes, then the Idempotency-Key of a POST.
func (f *fake) endpoint(allowed params, h func(*http.Request, url.Values) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, key, fp := f.check(r, allowed)
		if a.status == 0 && key != "" {
			a = f.begin(key, fp)
		}
		if a.status == 0 {
			var form url.Values
			if r.Method == http.MethodGet {
				form = r.URL.Query()
			} else {
				form = r.PostForm
			}
			a = h(r, form)
			if key != "" {
				f.end(key, a)
			}
		}
		if replay, isReplay := a.body.(replayed); isReplay {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(a.status)
			_, _ = w.Write(replay)
			return
		}
		if key != "" {
			w.Header().Set("Idempotency-Key", key)
		}
		sim.WriteJSON(w, a.status, a.body)
	}
}

// replayed is a saved answer's body, written as it was.
type replayed []byte

// check refuses what Stripe refuses before an endpoint begins. A zero answer lets the call on,
// with its Idempotency-Key (POST only) and the fingerprint of its endpoint and parameters.
func (f *fake) check(r *http.Request, allowed params) (a answer, key, fingerprint string) {
	if k, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); !ok || strings.TrimSpace(k) == "" {
		return failure(http.StatusUnauthorized, apiError{Type: "invalid_request_error",
			Message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."}, false), "", ""
	}
	if v := r.Header.Get("Stripe-Version"); v != "" && !apiVersionForm.MatchString(v) {
		return failure(http.StatusBadRequest, apiError{Type: "invalid_request_error",
			Message: fmt.Sprintf("Invalid Stripe API version: %s", v)}, false), "", ""
	}
	var form url.Values
	if r.Method == http.MethodGet {
		form = r.URL.Query()
	} else {
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
			return invalidParam("", "", fmt.Sprintf("Request's `Content-Type` header was %q. Expected: `application/x-www-form-urlencoded`.", ct)), "", ""
		}
		if err := r.ParseForm(); err != nil {
			return invalidParam("", "", "Invalid request body: "+err.Error()), "", ""
		}
		form = r.PostForm
	}
	keys := make([]string, 0, len(form))
	for k := range form {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !allowed.allows(k) {
			return invalidParam(k, "parameter_unknown", "Received unknown parameter: "+k), "", ""
		}
	}
	if r.Method != http.MethodPost {
		return answer{}, "", ""
	}
	key = r.Header.Get("Idempotency-Key")
	if len(key) > 255 {
		return invalidParam("", "", "Idempotency-Key must be 255 characters or fewer."), "", ""
	}
	return answer{}, key, r.URL.Path + "\n" + form.Encode()
}

// begin takes an Idempotency-Key for a call: a zero answer when the call is the key's first, else
// what Stripe answers to a repeat.
func (f *fake) begin(key, fingerprint string) answer {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.keys[key]
	switch {
	case s == nil:
		f.keys[key] = &saved{fingerprint: fingerprint, inProgress: true}
		return answer{}
	case s.inProgress:
		return failure(http.StatusConflict, apiError{Type: "idempotency_error", Code: "idempotency_key_in_use",
			Message: "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): " + key + ". Please try again later."}, false)
	case s.fingerprint != fingerprint:
		return failure(http.StatusBadRequest, apiError{Type: "idempotency_error",
			Message: "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '" + key + "' if you meant to execute a different request."}, false)
	}
	return answer{s.status, replayed(s.body), false}
}

// end saves a key's first answer, or lets the key go when Stripe would not have kept it.
func (f *fake) end(key string, a answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !a.keep {
		delete(f.keys, key)
		return
	}
	body, err := json.Marshal(a.body)
	if err != nil {
		delete(f.keys, key)
		return
	}
	s := f.keys[key]
	s.inProgress, s.status, s.body = false, a.status, append(body, '\n')
}

// expands reports whether the call asked to expand field (expand[0]=field or expand[]=field).
func expands(form url.Values, field string) bool {
	for k, vs := range form {
		if strings.HasPrefix(k, "expand[") && slices.Contains(vs, field) {
			return true
		}
	}
	return false
}

// checkExpand refuses an expansion the fake does not make (Stripe refuses one that does not exist).
func checkExpand(form url.Values, expandable ...string) (answer, bool) {
	for k, vs := range form {
		if !strings.HasPrefix(k, "expand[") {
			continue
		}
		for _, v := range vs {
			if !slices.Contains(expandable, v) {
				return invalidParam("expand", "", "This property cannot be expanded ("+v+")."), false
			}
		}
	}
	return answer{}, true
}

// amountParam reads a positive amount in minor units; optional ones may be absent (0).
func amountParam(form url.Values, name string, required bool) (int64, answer, bool) {
	v := form.Get(name)
	if v == "" {
		if required {
			return 0, invalidParam(name, "parameter_missing", "Missing required param: "+name+"."), false
		}
		return 0, answer{}, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > 99999999999 {
		return 0, invalidParam(name, "parameter_invalid_integer", "Invalid integer: "+v), false
	}
	return n, answer{}, true
}

func boolParam(form url.Values, name string) (bool, answer, bool) {
	switch form.Get(name) {
	case "", "false":
		return false, answer{}, true
	case "true":
		return true, answer{}, true
	}
	return false, invalidParam(name, "", "Invalid boolean: "+form.Get(name)), false
}

func (f *fake) createIntent(r *http.Request, form url.Values) answer {
	amount, a, valid := amountParam(form, "amount", true)
	if !valid {
		return a
	}
	currency := form.Get("currency")
	if len(currency) != 3 || strings.ToLower(currency) != currency {
		return invalidParam("currency", "parameter_invalid_string", "Invalid currency: "+currency+". Stripe currently supports these currencies: usd, eur, ...")
	}
	confirm, a, valid := boolParam(form, "confirm")
	if !valid {
		return a
	}
	if !confirm {
		return invalidParam("confirm", "", "stripesim simulates PaymentIntents created and confirmed at once (confirm=true) only.")
	}
	pm := form.Get("payment_method")
	if pm == "" {
		return invalidParam("payment_method", "parameter_missing", "You cannot confirm this PaymentIntent because it's missing a payment method.")
	}
	captureMethod := cmp.Or(form.Get("capture_method"), "automatic_async")
	if !slices.Contains([]string{"automatic", "automatic_async", "manual"}, captureMethod) {
		return invalidParam("capture_method", "", "Invalid capture_method: must be one of automatic, automatic_async, or manual")
	}
	for k, vs := range form {
		if strings.HasPrefix(k, "payment_method_types[") && !slices.Equal(vs, []string{"card"}) {
			return invalidParam(k, "", "stripesim simulates card payments only.")
		}
	}
	errorOnAction, a, valid := boolParam(form, "error_on_requires_action")
	if !valid {
		return a
	}
	if a, valid := checkExpand(form, "latest_charge"); !valid {
		return a
	}
	n := sim.NewTx{Reference: r.Header.Get("Idempotency-Key"), Amount: amount, Currency: strings.ToUpper(currency),
		Capture: captureMethod != "manual"}
	in := &intent{created: time.Now().Unix(), captureMethod: captureMethod, paymentMethod: pm,
		transferGroup: form.Get("transfer_group"), description: form.Get("description"), metadata: metadata(form)}
	switch code, declined := declines[pm]; {
	case declined || f.s.Declines(pm):
		n.Decline, in.errorCode = cmp.Or(code, DeclineCode), "card_declined"
	case pm == AuthenticationRequired && errorOnAction:
		n.Decline, in.errorCode = "authentication_required", "authentication_required"
	case pm == AuthenticationRequired:
		// Waiting for the customer to authenticate: nothing authorized, no charge made.
		n.Decline, in.requiresAction = "authentication_required", true
	}
	t, created := f.s.Create(r, n)
	if !created {
		// The ledger holds the reference without a saved answer: a key whose answer was never
		// saved (its first request failed before the endpoint began) cannot be in the ledger, so
		// this is a reference reused across endpoints, which Stripe refuses.
		return failure(http.StatusBadRequest, apiError{Type: "idempotency_error",
			Message: "Keys for idempotent requests can only be used with the same parameters they were first used with."}, false)
	}
	f.mu.Lock()
	f.intents[t.ID] = in
	f.order = append(f.order, t.ID)
	if in.transferGroup != "" && !in.requiresAction {
		f.byGroup[in.transferGroup] = append(f.byGroup[in.transferGroup], t.ID)
	}
	f.mu.Unlock()
	f.changed("payment_intent.created", t)
	pi := f.intentObject(t, expands(form, "latest_charge"))
	switch {
	case in.requiresAction:
		return ok(pi)
	case t.Status == sim.StatusPending:
		f.changed("payment_intent.processing", t)
		return ok(pi)
	case t.Status == sim.StatusDeclined:
		f.changed("payment_intent.payment_failed", t)
		return failure(http.StatusPaymentRequired, apiError{Type: "card_error", Code: in.errorCode, DeclineCode: t.DeclineCode,
			Message: declineMessage(t.DeclineCode), Charge: chargeID(t.ID), PaymentIntent: &pi}, true)
	}
	f.changed(eventOf(t), t)
	return ok(pi)
}

func declineMessage(code string) string {
	switch code {
	case "insufficient_funds":
		return "Your card has insufficient funds."
	case "authentication_required":
		return "Your card was declined. This transaction requires authentication."
	}
	return "Your card was declined."
}

// metadata collects the metadata[key] parameters.
func metadata(form url.Values) map[string]string {
	m := map[string]string{}
	for k, vs := range form {
		if name, ok := strings.CutPrefix(k, "metadata["); ok && strings.HasSuffix(name, "]") && len(vs) > 0 {
			m[strings.TrimSuffix(name, "]")] = vs[0]
		}
	}
	return m
}

// find returns the PaymentIntent named id (by the parameter param): by its id only, as Stripe
// does (the ledger would also find it by its Idempotency-Key).
func (f *fake) find(id, param string) (sim.Tx, *intent, answer, bool) {
	t, found := f.s.Ledger().Lookup(id)
	f.mu.Lock()
	in := f.intents[id]
	f.mu.Unlock()
	if !found || t.ID != id || in == nil {
		return sim.Tx{}, nil, failure(http.StatusNotFound, apiError{Type: "invalid_request_error", Code: "resource_missing", Param: param,
			Message: "No such payment_intent: '" + id + "'"}, true), false
	}
	return t, in, answer{}, true
}

func (f *fake) retrieveIntent(r *http.Request, form url.Values) answer {
	if a, valid := checkExpand(form, "latest_charge"); !valid {
		return a
	}
	t, _, a, found := f.find(r.PathValue("intent"), "intent")
	if !found {
		return a
	}
	return ok(f.intentObject(t, expands(form, "latest_charge")))
}

// unexpectedState is Stripe's answer to an operation on a PaymentIntent in the wrong status.
func unexpectedState(pi piObject, action, allowed string) answer {
	return failure(http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "payment_intent_unexpected_state",
		Message: fmt.Sprintf("This PaymentIntent could not be %s because it has a status of %s. Only a PaymentIntent with one of the following statuses may be %s: %s.",
			action, pi.Status, action, allowed), PaymentIntent: &pi}, true)
}

func (f *fake) captureIntent(r *http.Request, form url.Values) answer {
	amount, a, valid := amountParam(form, "amount_to_capture", false)
	if !valid {
		return a
	}
	if a, valid := checkExpand(form, "latest_charge"); !valid {
		return a
	}
	t, _, a, found := f.find(r.PathValue("intent"), "intent")
	if !found {
		return a
	}
	if t.Status != sim.StatusAuthorized {
		return unexpectedState(f.intentObject(t, false), "captured", "requires_capture")
	}
	res, err := f.s.Ledger().Capture(r.Header.Get("Idempotency-Key"), t.ID, amount)
	switch {
	case errors.Is(err, sim.ErrAmount):
		return failure(http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "amount_too_large", Param: "amount_to_capture",
			Message: fmt.Sprintf("The amount_to_capture (%d) must be less than or equal to the amount_capturable (%d).", amount, t.Amount)}, true)
	case err != nil:
		return unexpectedState(f.intentObject(t, false), "captured", "requires_capture")
	}
	f.changed("payment_intent.succeeded", res.Tx)
	return ok(f.intentObject(res.Tx, expands(form, "latest_charge")))
}

func (f *fake) cancelIntent(r *http.Request, form url.Values) answer {
	reason := form.Get("cancellation_reason")
	if reason != "" && !slices.Contains([]string{"duplicate", "fraudulent", "requested_by_customer", "abandoned"}, reason) {
		return invalidParam("cancellation_reason", "", "Invalid cancellation_reason: must be one of duplicate, fraudulent, requested_by_customer, or abandoned")
	}
	if a, valid := checkExpand(form, "latest_charge"); !valid {
		return a
	}
	t, in, a, found := f.find(r.PathValue("intent"), "intent")
	if !found {
		return a
	}
	if t.Status != sim.StatusAuthorized {
		return unexpectedState(f.intentObject(t, false), "canceled", "requires_payment_method, requires_capture, requires_confirmation, requires_action, processing")
	}
	res, err := f.s.Ledger().Void(r.Header.Get("Idempotency-Key"), t.ID)
	if err != nil {
		return unexpectedState(f.intentObject(t, false), "canceled", "requires_capture")
	}
	f.mu.Lock()
	if in.canceledAt == 0 {
		in.canceledAt = time.Now().Unix()
	}
	f.mu.Unlock()
	f.changed("payment_intent.canceled", res.Tx)
	return ok(f.intentObject(res.Tx, expands(form, "latest_charge")))
}

func (f *fake) createRefund(r *http.Request, form url.Values) answer {
	id := form.Get("payment_intent")
	if id == "" {
		return invalidParam("payment_intent", "parameter_missing", "stripesim refunds by payment_intent: Missing required param: payment_intent.")
	}
	amount, a, valid := amountParam(form, "amount", false)
	if !valid {
		return a
	}
	reason := form.Get("reason")
	if reason != "" && !slices.Contains([]string{"duplicate", "fraudulent", "requested_by_customer"}, reason) {
		return invalidParam("reason", "", "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer")
	}
	if a, valid := checkExpand(form, "charge", "payment_intent"); !valid {
		return a
	}
	t, _, a, found := f.find(id, "payment_intent")
	if !found {
		return a
	}
	if t.Status == sim.StatusAuthorized || t.Status == sim.StatusVoided || t.Status == sim.StatusDeclined {
		return failure(http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "charge_not_refundable",
			Message: "This PaymentIntent does not have a successful charge to refund."}, true)
	}
	res, err := f.s.Refund(r, r.Header.Get("Idempotency-Key"), t.ID, amount)
	switch {
	case errors.Is(err, sim.ErrAmount) && t.Refunded >= t.Amount:
		return failure(http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "charge_already_refunded",
			Message: "Charge " + chargeID(t.ID) + " has already been refunded."}, true)
	case errors.Is(err, sim.ErrAmount):
		return failure(http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "amount_too_large", Param: "amount",
			Message: fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d)", amount, t.Amount-t.Refunded)}, true)
	case err != nil:
		return failure(http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "charge_not_refundable", Message: err.Error()}, true)
	}
	f.changed("charge.refunded", res.Tx)
	rf := refundObject{ID: res.ID, Object: "refund", Amount: res.Amount, Currency: strings.ToLower(res.Tx.Currency),
		Created: time.Now().Unix(), Metadata: metadata(form), Status: "succeeded", Charge: chargeID(res.Tx.ID), PaymentIntent: res.Tx.ID}
	if reason != "" {
		rf.Reason = &reason
	}
	if expands(form, "charge") {
		rf.Charge = f.chargeObject(res.Tx)
	}
	if expands(form, "payment_intent") {
		rf.PaymentIntent = f.intentObject(res.Tx, false)
	}
	return ok(rf)
}

// listCharges lists the charges the PaymentIntents made, newest first: those of a transfer_group,
// of a payment_intent, or all of them.
func (f *fake) listCharges(_ *http.Request, form url.Values) answer {
	limit := 10
	if v := form.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return invalidParam("limit", "", "Invalid limit: must be between 1 and 100")
		}
		limit = n
	}
	f.mu.Lock()
	ids := f.order
	if g, ok := form["transfer_group"]; ok {
		ids = f.byGroup[g[0]]
	}
	ids = slices.Clone(ids)
	f.mu.Unlock()
	if pi := form.Get("payment_intent"); pi != "" {
		ids = slices.DeleteFunc(ids, func(id string) bool { return id != pi })
	}
	data := []chargeObject{}
	for _, id := range slices.Backward(ids) {
		t, found := f.s.Ledger().Lookup(id)
		f.mu.Lock()
		in := f.intents[id]
		f.mu.Unlock()
		if !found || in == nil || in.requiresAction {
			continue // nothing charged: no charge object
		}
		if len(data) == limit {
			break
		}
		data = append(data, f.chargeObject(t))
	}
	return ok(map[string]any{"object": "list", "url": "/v1/charges", "has_more": false, "data": data})
}

// listIntents is the adapter's health call: a list matching nothing.
func (f *fake) listIntents(w http.ResponseWriter, r *http.Request) {
	a, _, _ := f.check(r, listIntentParams)
	if a.status == 0 {
		a = ok(map[string]any{"object": "list", "url": "/v1/payment_intents", "has_more": false, "data": []piObject{}})
	}
	sim.WriteJSON(w, a.status, a.body)
}

// changed is where every change of a PaymentIntent, its charge or a refund passes, with the
// event type Stripe names it by: it delivers the event, as Stripe's Event object, to the
// callback set (PUT /_sim/callback), signed as Stripe signs (Sign). A charge.refunded event
// carries the charge; every other, the PaymentIntent (its latest_charge an id).
func (f *fake) changed(eventType string, t sim.Tx) {
	var obj any
	if strings.HasPrefix(eventType, "charge.") {
		obj = f.chargeObject(t)
	} else {
		obj = f.intentObject(t, false)
	}
	f.mu.Lock()
	f.events++
	n := f.events
	f.mu.Unlock()
	body, err := json.Marshal(Event{
		ID: fmt.Sprintf("evt_sim%018d", n), Object: "event", APIVersion: APIVersion, Created: time.Now().Unix(),
		Data: EventData{Object: obj}, PendingWebhooks: 1, Request: EventRequest{}, Type: eventType,
	})
	if err != nil {
		return
	}
	f.s.Notify(body, Sign)
}

// settled is a pending PaymentIntent made final (sim.Behavior.Pending): its event.
func (f *fake) settled(t sim.Tx) {
	if t.Status == sim.StatusDeclined {
		f.mu.Lock()
		if in := f.intents[t.ID]; in != nil {
			in.errorCode = "card_declined"
		}
		f.mu.Unlock()
		f.changed("payment_intent.payment_failed", t)
		return
	}
	f.changed(eventOf(t), t)
}

// APIVersion is the Stripe API version of the events stripesim sends.
const APIVersion = "2026-08-26.dahlia"

// SignatureHeader is the header Stripe signs its webhook events in.
const SignatureHeader = "Stripe-Signature"

// Event is Stripe's Event object, as its webhooks deliver it.
type Event struct {
	ID              string       `json:"id"`
	Object          string       `json:"object"`
	APIVersion      string       `json:"api_version"`
	Created         int64        `json:"created"`
	Data            EventData    `json:"data"`
	Livemode        bool         `json:"livemode"`
	PendingWebhooks int          `json:"pending_webhooks"`
	Request         EventRequest `json:"request"`
	Type            string       `json:"type"`
}

// EventData holds the object an event is about.
type EventData struct {
	Object any `json:"object"`
}

// EventRequest is the API request that caused an event; stripesim leaves it null.
type EventRequest struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

// Sign is Stripe's webhook signature of body with the endpoint's secret at now: the header
// "Stripe-Signature: t=<Unix seconds>,v1=<lowercase hex of HMAC-SHA256(secret, "<t>.<body>")>",
// the secret used whole ("whsec_..."), as Stripe does.
func Sign(body []byte, secret string, now time.Time) http.Header {
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	h := http.Header{}
	h.Set(SignatureHeader, "t="+ts+",v1="+hex.EncodeToString(mac.Sum(nil)))
	return h
}

// eventOf names the event of a PaymentIntent just confirmed.
func eventOf(t sim.Tx) string {
	if t.Status == sim.StatusAuthorized {
		return "payment_intent.amount_capturable_updated"
	}
	return "payment_intent.succeeded"
}

// chargeID is the id of the charge a PaymentIntent made (one per PaymentIntent here).
func chargeID(intentID string) string { return "ch_" + strings.TrimPrefix(intentID, "pi_") }

// piObject is Stripe's PaymentIntent, with the fields stripesim gives.
type piObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CanceledAt         *int64            `json:"canceled_at"`
	CancellationReason *string           `json:"cancellation_reason"`
	CaptureMethod      string            `json:"capture_method"`
	ClientSecret       string            `json:"client_secret"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Description        *string           `json:"description"`
	LastPaymentError   *apiError         `json:"last_payment_error"`
	LatestCharge       any               `json:"latest_charge"` // its id, the charge expanded, or null
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	NextAction         *nextAction       `json:"next_action"`
	PaymentMethod      *string           `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Status             string            `json:"status"`
	TransferGroup      *string           `json:"transfer_group"`
}

type nextAction struct {
	Type         string         `json:"type"`
	UseStripeSDK map[string]any `json:"use_stripe_sdk"`
}

// chargeObject is Stripe's Charge, with the fields stripesim gives.
type chargeObject struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	BillingDetails billingDetails    `json:"billing_details"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Description    *string           `json:"description"`
	Disputed       bool              `json:"disputed"`
	FailureCode    *string           `json:"failure_code"`
	FailureMessage *string           `json:"failure_message"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Outcome        chargeOutcome     `json:"outcome"`
	Paid           bool              `json:"paid"`
	PaymentIntent  string            `json:"payment_intent"`
	PaymentMethod  string            `json:"payment_method"`
	Refunded       bool              `json:"refunded"`
	Status         string            `json:"status"`
	TransferGroup  *string           `json:"transfer_group"`
}

type billingDetails struct {
	Address *struct{} `json:"address"`
	Email   *string   `json:"email"`
	Name    *string   `json:"name"`
	Phone   *string   `json:"phone"`
}

type chargeOutcome struct {
	NetworkStatus string  `json:"network_status"`
	Reason        *string `json:"reason"`
	RiskLevel     string  `json:"risk_level"`
	SellerMessage string  `json:"seller_message"`
	Type          string  `json:"type"`
}

// refundObject is Stripe's Refund; charge and payment_intent are ids, or expanded.
type refundObject struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Charge        any               `json:"charge"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent any               `json:"payment_intent"`
	Reason        *string           `json:"reason"`
	Status        string            `json:"status"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// intentObject is the PaymentIntent t as Stripe shows it, its charge expanded when asked.
func (f *fake) intentObject(t sim.Tx, expandCharge bool) piObject {
	f.mu.Lock()
	in := *f.intents[t.ID]
	f.mu.Unlock()
	pi := piObject{
		ID: t.ID, Object: "payment_intent", Amount: t.Amount, CaptureMethod: in.captureMethod,
		ClientSecret: t.ID + "_secret_stripesim", ConfirmationMethod: "automatic", Created: in.created,
		Currency: strings.ToLower(t.Currency), Description: nullable(in.description), Metadata: in.metadata,
		PaymentMethod: &in.paymentMethod, PaymentMethodTypes: []string{"card"}, TransferGroup: nullable(in.transferGroup),
	}
	if pi.Metadata == nil {
		pi.Metadata = map[string]string{}
	}
	switch t.Status {
	case sim.StatusPending:
		pi.Status = "processing"
	case sim.StatusAuthorized:
		pi.Status, pi.AmountCapturable = "requires_capture", t.Amount
	case sim.StatusVoided:
		reason := "requested_by_customer"
		pi.Status, pi.CanceledAt, pi.CancellationReason = "canceled", &in.canceledAt, &reason
	case sim.StatusDeclined:
		pi.Status, pi.PaymentMethod = "requires_payment_method", nil
		if in.requiresAction {
			pi.Status, pi.PaymentMethod = "requires_action", &in.paymentMethod
			pi.NextAction = &nextAction{Type: "use_stripe_sdk", UseStripeSDK: map[string]any{"type": "three_d_secure_redirect"}}
		} else {
			pi.LastPaymentError = &apiError{Type: "card_error", Code: in.errorCode, DeclineCode: t.DeclineCode,
				Message: declineMessage(t.DeclineCode), Charge: chargeID(t.ID)}
		}
	default: // captured, refunded in part or whole
		pi.Status, pi.AmountReceived = "succeeded", t.Amount
	}
	if !in.requiresAction {
		pi.LatestCharge = chargeID(t.ID)
		if expandCharge {
			pi.LatestCharge = f.chargeObjectOf(t, in)
		}
	}
	return pi
}

// chargeObject is the charge PaymentIntent t made, as Stripe shows it.
func (f *fake) chargeObject(t sim.Tx) chargeObject {
	f.mu.Lock()
	in := *f.intents[t.ID]
	f.mu.Unlock()
	return f.chargeObjectOf(t, in)
}

func (f *fake) chargeObjectOf(t sim.Tx, in intent) chargeObject {
	c := chargeObject{
		ID: chargeID(t.ID), Object: "charge", Amount: t.Amount, AmountRefunded: t.Refunded, Created: in.created,
		Currency: strings.ToLower(t.Currency), Description: nullable(in.description), Metadata: in.metadata,
		Outcome: chargeOutcome{NetworkStatus: "approved_by_network", RiskLevel: "normal", SellerMessage: "Payment complete.", Type: "authorized"},
		Paid:    true, PaymentIntent: t.ID, PaymentMethod: in.paymentMethod, Status: "succeeded", TransferGroup: nullable(in.transferGroup),
	}
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	switch t.Status {
	case sim.StatusDeclined:
		reason, message := t.DeclineCode, declineMessage(t.DeclineCode)
		c.Status, c.Paid, c.FailureCode, c.FailureMessage = "failed", false, &in.errorCode, &message
		c.Outcome = chargeOutcome{NetworkStatus: "declined_by_network", Reason: &reason, RiskLevel: "normal",
			SellerMessage: "The bank did not return any further details with this decline.", Type: "issuer_declined"}
	case sim.StatusPending:
		c.Status, c.Paid = "pending", false
	case sim.StatusAuthorized:
	case sim.StatusVoided:
		c.Refunded, c.AmountRefunded = true, t.Amount // a released authorization
	default:
		c.Captured, c.AmountCaptured = true, t.Amount
		c.Refunded = t.Status == sim.StatusRefunded
	}
	return c
}
