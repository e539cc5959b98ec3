package httpapi

import (
	"strconv"
	"testing"

	"github.com/payrouter/payrouter"
)

// BenchmarkChargeHealthy is POST /charge served by the handler, through the real router, guard,
// adapter and transport to the paywell simulator on loopback: payrouter's own CPU per charge.
func BenchmarkChargeHealthy(b *testing.B) {
	st := newStack(b, "admin-token")
	body := `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r := st.charge("bench-"+strconv.Itoa(i), body); r.status != 201 {
			b.Fatalf("got %d %s", r.status, r.body)
		}
	}
}

// BenchmarkChargeFastFail is POST /charge answered 503 with every breaker forced open.
func BenchmarkChargeFastFail(b *testing.B) {
	st := newStack(b, "admin-token")
	for _, g := range []string{"paywell", "ding"} {
		st.domains.Breaker(g, payrouter.OpCharge).Force(payrouter.ForcedOpen)
	}
	body := `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r := st.charge("bench-"+strconv.Itoa(i), body); r.status != 503 {
			b.Fatalf("got %d %s", r.status, r.body)
		}
	}
}
