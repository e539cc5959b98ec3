package httpapi

import (
	"context"
	"crypto/sha256"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/internal/testlog"
)

// keyRecorder is a Store that notes every idempotency key the handlers give it.
type keyRecorder struct {
	payrouter.Store
	mu   sync.Mutex
	seen []string
}

func (k *keyRecorder) note(key string) {
	k.mu.Lock()
	k.seen = append(k.seen, key)
	k.mu.Unlock()
}

func (k *keyRecorder) Claim(ctx context.Context, owner, key, fp string, holdFor time.Duration) (*payrouter.IdempotencyRecord, payrouter.Hold, error) {
	k.note(key)
	return k.Store.Claim(ctx, owner, key, fp, holdFor)
}

func (k *keyRecorder) ClaimCharge(ctx context.Context, owner, key, fp string, holdFor time.Duration, c *payrouter.Charge) (payrouter.Claimed, error) {
	k.note(key)
	return k.Store.ClaimCharge(ctx, owner, key, fp, holdFor, c)
}

func (k *keyRecorder) Peek(ctx context.Context, key, fp string) (*payrouter.IdempotencyRecord, error) {
	k.note(key)
	return k.Store.Peek(ctx, key, fp)
}

func (k *keyRecorder) keys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.seen...)
}

const pan = "4111111111111111"

// panForms are the forms of a card number issue 12 found passing the old filter ("The raw
// card number filter is easy to pass"), and the plain ones it caught.
var panForms = []struct{ name, s string }{
	{"plain", pan},
	{"single spaces", "4111 1111 1111 1111"},
	{"hyphens", "4111-1111-1111-1111"},
	{"double spaces", "4111  1111  1111  1111"},
	{"dots", "4111.1111.1111.1111"},
	{"slashes", "4111/1111/1111/1111"},
	{"underscores", "4111_1111_1111_1111"},
	{"commas", "4111,1111,1111,1111"},
	{"tabs", "4111\t1111\t1111\t1111"},
	{"NBSP", "4111\u00a01111\u00a01111\u00a01111"},
	{"zero-width spaces", "4111\u200b1111\u200b1111\u200b1111"},
	{"full-width digits", "４１１１１１１１１１１１１１１１"},
	{"Arabic-Indic digits", "٤١١١١١١١١١١١١١١١"},
	{"PAN, expiry and CVV in one run", pan + "1227" + "123"},
}

// wantRefused checks a 400 invalid-request with an error on field, that repeats no form of the
// card number, and that the log has none either.
func wantRefused(t *testing.T, st *stack, r reply, field, form string) {
	t.Helper()
	if r.status != 400 || problemType(t, r) != "/problems/invalid-request" {
		t.Fatalf("got %d %s, want 400 invalid-request", r.status, r.body)
	}
	p := decodeInto[problem](t, r)
	named := false
	for _, fe := range p.Errors {
		named = named || fe.Field == field && fe.Message == cardNumberRefusal
	}
	if !named {
		t.Errorf("want the error %q on %q: %s", cardNumberRefusal, field, r.body)
	}
	for _, leak := range []string{form, url.PathEscape(form), "4111", "١١١١", "１１１１"} {
		if strings.Contains(r.body, leak) {
			t.Errorf("the answer repeats %q: %s", leak, r.body)
		}
		if log := logText(st.log); strings.Contains(log, leak) {
			t.Errorf("the log holds %q: %s", leak, log)
		}
	}
}

// logTime is the time member of a JSON log line.
var logTime = regexp.MustCompile(`"time":"[^"]*"`)

// logText is what the handlers logged, without each line's time: its nanoseconds are digits
// that may spell "4111" by chance.
func logText(b *testlog.Buffer) string { return logTime.ReplaceAllString(b.String(), `"time":""`) }

// TestCardNumbersRefusedEverywhere: every form of a card number of issue 12 is refused in
// every caller-supplied string of the storefront API, naming where, never repeating it, and
// nothing reaches a gateway.
func TestCardNumbersRefusedEverywhere(t *testing.T) {
	st := newStack(t, "admin-token")
	captured := st.newCharge(t, "setup-1", true)
	body := func(extra string) string {
		return `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}` + extra + `}`
	}
	before := len(st.ledger(t, "paywell")) + len(st.ledger(t, "ding"))
	for i, form := range panForms {
		q := strings.ReplaceAll(strings.ReplaceAll(form.s, "\t", `\t`), "\u00a0", `\u00a0`) // as JSON
		t.Run(form.name, func(t *testing.T) {
			t.Run("body field", func(t *testing.T) {
				wantRefused(t, st, st.charge("f-desc-"+form.name, body(`,"description":"`+q+`"`)), "description", form.s)
				wantRefused(t, st, st.charge("f-cus-"+form.name, body(`,"customer_id":"`+q+`"`)), "customer_id", form.s)
			})
			t.Run("metadata key", func(t *testing.T) {
				wantRefused(t, st, st.charge("f-mk-"+form.name, body(`,"metadata":{"`+q+`":"x"}`)), "metadata", form.s)
			})
			t.Run("metadata value", func(t *testing.T) {
				wantRefused(t, st, st.charge("f-mv-"+form.name, body(`,"metadata":{"note":"`+q+`"}`)), "metadata.note", form.s)
			})
			t.Run("Idempotency-Key", func(t *testing.T) {
				wantRefused(t, st, st.charge(form.s, body("")), "Idempotency-Key", form.s)
				wantRefused(t, st, st.post("/charge/"+captured+"/refund", form.s, `{"amount":1}`), "Idempotency-Key", form.s)
			})
			t.Run("path id", func(t *testing.T) {
				wantRefused(t, st, st.get("/charge/"+url.PathEscape(form.s)), "id", form.s)
				wantRefused(t, st, st.get("/refund/"+url.PathEscape(form.s)), "id", form.s)
				for _, op := range []string{"capture", "void", "refund"} {
					wantRefused(t, st, st.post("/charge/"+url.PathEscape(form.s)+"/"+op, "f-path-"+op+form.name, ""), "id", form.s)
				}
			})
			t.Run("X-Request-Id", func(t *testing.T) {
				// Replaced, not refused: the charge goes through under an id payrouter made.
				r := st.charge("f-rid-"+string(rune('a'+i)), body(""), "X-Request-Id", form.s)
				if r.status != 201 {
					t.Fatalf("a charge with a card number as X-Request-Id: %d %s, want 201 under a new id", r.status, r.body)
				}
				if got := r.header.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") {
					t.Errorf("X-Request-Id answered %q, want one payrouter made (req_...)", got)
				}
				if !strings.Contains(st.log.String(), "http.request_id_replaced") {
					t.Error("no warning that the X-Request-Id was replaced")
				}
				for _, leak := range []string{form.s, "4111"} {
					if strings.Contains(logText(st.log), leak) {
						t.Errorf("the log holds %q", leak)
					}
				}
			})
		})
	}
	after := len(st.ledger(t, "paywell")) + len(st.ledger(t, "ding"))
	if want := before + len(panForms); after != want { // one charge per form: the X-Request-Id ones
		t.Errorf("the gateways saw %d transactions, want %d: a refused request reached a gateway", after-before, len(panForms))
	}
}

// TestPathIDsCapped: an id in a path is at most 64 characters of A-Z a-z 0-9 _ . : -; a longer
// or stranger one is refused and never echoed (issue 12: a 404 echoed an 8,000-character id).
func TestPathIDsCapped(t *testing.T) {
	st := newStack(t, "admin-token")
	long := "ch_" + strings.Repeat("x", 8000)
	for _, id := range []string{long, "ch_" + strings.Repeat("y", 62), "ch_<script>", "ch_ü", "ch_%00"} {
		for _, r := range []reply{st.get("/charge/" + url.PathEscape(id)), st.get("/refund/" + url.PathEscape(id)),
			st.post("/charge/"+url.PathEscape(id)+"/void", "cap-"+id[:5], "")} {
			if r.status != 400 || problemType(t, r) != "/problems/invalid-request" || !strings.Contains(r.body, `"field":"id"`) {
				t.Errorf("id of %d characters: %d %s, want 400 invalid-request on id", len(id), r.status, r.body)
			}
			if strings.Contains(r.body, id[3:min(len(id), 40)]) || len(r.body) > 1000 {
				t.Errorf("the answer echoes the id: %.200s", r.body)
			}
		}
	}
	if r := st.get("/charge/ch_" + strings.Repeat("z", 61)); r.status != 404 || len(r.body) > 1000 {
		t.Errorf("an id of 64 characters that names nothing: %d %s, want 404", r.status, r.body)
	}
	r := do(st.admin, "POST", "/admin/breakers/"+strings.Repeat("g", 8000)+"/charge/reset", "", "Authorization", "Bearer admin-token")
	if r.status != 404 || strings.Contains(r.body, "gggggggg") {
		t.Errorf("an unknown gateway of 8,000 characters: %d %.300s, want 404 without it", r.status, r.body)
	}
}

// TestIdempotencyKeyCharset: Idempotency-Key is 1 to 255 printable ASCII characters.
func TestIdempotencyKeyCharset(t *testing.T) {
	st := newStack(t, "admin-token")
	for _, key := range []string{"", strings.Repeat("k", 256), "tab\tkey", "clé", "nul\x00"} {
		r := st.charge(key, validCharge)
		if r.status != 400 || !strings.Contains(r.body, `"field":"Idempotency-Key"`) {
			t.Errorf("Idempotency-Key %q: %d %s, want 400 on Idempotency-Key", key, r.status, r.body)
		}
	}
	if r := st.charge(strings.Repeat("k", 255), validCharge); r.status != 201 {
		t.Errorf("an Idempotency-Key of 255 characters: %d %s", r.status, r.body)
	}
}

// TestStoreSeesNoIdempotencyKey: the store is given the digest of each Idempotency-Key, never
// the key; and the digest is what a key stored before (scope:key) became in pgstore's migration.
func TestStoreSeesNoIdempotencyKey(t *testing.T) {
	st := newStack(t, "admin-token")
	keys := []string{"order-1001-attempt-1", "550e8400-e29b-41d4-a716-446655440000"}
	id := st.newCharge(t, keys[0], false)
	st.newCharge(t, keys[1], true)
	if r := st.post("/charge/"+id+"/capture", "capture-of-1001", ""); r.status != 200 {
		t.Fatalf("capture: %d %s", r.status, r.body)
	}
	keys = append(keys, "capture-of-1001")
	scope := digestScope(sha256.Sum256([]byte("key-1")))
	seen := st.keys.keys()
	if len(seen) == 0 {
		t.Fatal("the store was given no key")
	}
	for _, k := range seen {
		if !strings.HasPrefix(k, payrouter.IdempotencyKeyPrefix) || len(k) != len(payrouter.IdempotencyKeyPrefix)+64 {
			t.Errorf("the store was given %q, want sha256:<64 hex>", k)
		}
		for _, raw := range keys {
			if strings.Contains(k, raw) {
				t.Errorf("the store was given %q, which holds the caller's key %q", k, raw)
			}
		}
	}
	for _, raw := range keys {
		digest := payrouter.IdempotencyStoreKey(scope, raw)
		found := false
		for _, k := range seen {
			found = found || k == digest
		}
		if !found {
			t.Errorf("key %q: its digest %s was never given to the store", raw, digest)
		}
	}
	// What memstore holds answers under the digest, and nothing under the key in clear.
	rec, err := st.store.Peek(t.Context(), payrouter.IdempotencyStoreKey(scope, "capture-of-1001"), fingerprint("POST /charge/"+id+"/capture", struct{}{}))
	if err != nil || rec == nil || rec.Status != 200 {
		t.Errorf("memstore under the digest: %+v %v, want the capture's answer", rec, err)
	}
	if rec, err := st.store.Peek(t.Context(), scope+":capture-of-1001", fingerprint("POST /charge/"+id+"/capture", struct{}{})); rec != nil || err != nil {
		t.Errorf("memstore under scope:key in clear: %+v %v, want nothing", rec, err)
	}
	// A retry replays, so the charge id did not change with the stored form.
	if r := st.post("/charge/"+id+"/capture", "capture-of-1001", ""); r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("capture retried: %d %s", r.status, r.header)
	}
}

// besideHexWordForms are the forms issue 19 found accepted: a card number beside a short word
// of hexadecimal digits, which the detector's rule for UUIDs used to excuse.
var besideHexWordForms = []struct{ name, s string }{
	{"description form", "card 4111 1111 1111 1111 a1"},
	{"metadata form", "5555555555554444-c0ffee1"},
	{"customer id form", "1a 378282246310005"},
	{"token form", "4111111111111111-a1"},
	{"Idempotency-Key form", "4111111111111111 1a"},
	{"beside a UUID", "4111111111111111-550e8400-e29b-41d4-a716-446655440000"},
}

// TestCardNumberBesideHexWordRefused (issue 19): each form is refused in every field kind the
// issue names, 400 naming the field, never repeated or logged; a refused request leaves
// nothing in the store and reaches no gateway, and a card number sent as X-Request-Id is
// replaced by one payrouter makes.
func TestCardNumberBesideHexWordRefused(t *testing.T) {
	st := newStack(t, "admin-token")
	captured := st.newCharge(t, "setup-1", true)
	charges, keys := st.store.ChargesLen(), len(st.keys.keys())
	before := len(st.ledger(t, "paywell")) + len(st.ledger(t, "ding"))
	body := func(token, extra string) string {
		return `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"` + token + `"}` + extra + `}`
	}
	replaced := 0
	for i, form := range besideHexWordForms {
		t.Run(form.name, func(t *testing.T) {
			t.Run("description", func(t *testing.T) {
				wantRefused(t, st, st.charge("h-desc-"+form.name, body("tok_visa", `,"description":"`+form.s+`"`)), "description", form.s)
			})
			t.Run("metadata value", func(t *testing.T) {
				wantRefused(t, st, st.charge("h-mv-"+form.name, body("tok_visa", `,"metadata":{"note":"`+form.s+`"}`)), "metadata.note", form.s)
			})
			t.Run("customer_id", func(t *testing.T) {
				wantRefused(t, st, st.charge("h-cus-"+form.name, body("tok_visa", `,"customer_id":"`+form.s+`"`)), "customer_id", form.s)
			})
			t.Run("payment token", func(t *testing.T) {
				wantRefused(t, st, st.charge("h-tok-"+form.name, body(form.s, "")), "payment_method.token", form.s)
			})
			t.Run("Idempotency-Key", func(t *testing.T) {
				wantRefused(t, st, st.charge(form.s, body("tok_visa", "")), "Idempotency-Key", form.s)
				wantRefused(t, st, st.post("/charge/"+captured+"/refund", form.s, `{"amount":1}`), "Idempotency-Key", form.s)
			})
			t.Run("path id", func(t *testing.T) {
				wantRefused(t, st, st.get("/charge/"+url.PathEscape(form.s)), "id", form.s)
				wantRefused(t, st, st.get("/refund/"+url.PathEscape(form.s)), "id", form.s)
				for _, op := range []string{"capture", "void", "refund"} {
					wantRefused(t, st, st.post("/charge/"+url.PathEscape(form.s)+"/"+op, "h-path-"+op+form.name, ""), "id", form.s)
				}
			})
			t.Run("X-Request-Id", func(t *testing.T) {
				// Replaced, not refused (server.go's requestID says why): the charge goes
				// through under an id payrouter made, and the number goes nowhere.
				r := st.charge("h-rid-"+string(rune('a'+i)), body("tok_visa", ""), "X-Request-Id", form.s)
				replaced++
				if r.status != 201 {
					t.Fatalf("a charge with X-Request-Id %q: %d %s, want 201 under a new id", form.s, r.status, r.body)
				}
				if got := r.header.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") {
					t.Errorf("X-Request-Id answered %q, want one payrouter made (req_...)", got)
				}
				if strings.Contains(r.body, form.s) || strings.Contains(logText(st.log), form.s) {
					t.Errorf("the answer or the log holds %q", form.s)
				}
			})
		})
	}
	if n := st.store.ChargesLen(); n != charges+replaced {
		t.Errorf("the store holds %d charges, want %d: a refused request was stored", n, charges+replaced)
	}
	// Each X-Request-Id charge gives the store its key to claim, and may peek it too; no
	// refused request gives any.
	if n := len(st.keys.keys()) - keys; n > 2*replaced {
		t.Errorf("the store was given %d idempotency keys, want at most %d: a refused request reached it", n, 2*replaced)
	}
	after := len(st.ledger(t, "paywell")) + len(st.ledger(t, "ding"))
	if after != before+replaced {
		t.Errorf("the gateways saw %d transactions, want %d: a refused request reached a gateway", after-before, replaced)
	}
}
