package payrouter

import "testing"

func TestChargeOfReference(t *testing.T) {
	for _, tc := range []struct {
		ref     string
		id      string
		attempt int
		ok      bool
	}{
		{AttemptReference("ch_ABC", 1), "ch_ABC", 1, true},
		{AttemptReference("ch_a-a2", 12), "ch_a-a2", 12, true},
		{"ch_ABC-a0", "", 0, false},
		{"ch_ABC-a01", "", 0, false},
		{"ch_ABC-a", "", 0, false},
		{"ch_ABC-a1-capture", "", 0, false},
		{"-a1", "", 0, false},
		{"ch_ABC", "", 0, false},
		{"", "", 0, false},
	} {
		id, n, ok := ChargeOfReference(tc.ref)
		if id != tc.id || n != tc.attempt || ok != tc.ok {
			t.Errorf("ChargeOfReference(%q) = %q, %d, %v; want %q, %d, %v", tc.ref, id, n, ok, tc.id, tc.attempt, tc.ok)
		}
	}
}
