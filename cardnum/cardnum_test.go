package cardnum

import (
	"strings"
	"testing"
	"unicode"
)

// toScript writes the ASCII digits of s in the decimal digits starting at zero.
func toScript(s string, zero rune) string {
	var b strings.Builder
	for _, r := range s {
		if r >= '0' && r <= '9' {
			b.WriteRune(zero + r - '0')
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// groups writes pan in groups of four joined by sep.
func groups(pan, sep string) string {
	var parts []string
	for len(pan) > 4 {
		parts = append(parts, pan[:4])
		pan = pan[4:]
	}
	return strings.Join(append(parts, pan), sep)
}

const visa = "4111111111111111"

// issueForms are the forms of a card number issue 12 found accepted by the old filter, and
// others of the same kinds; every one must be found.
var issueForms = []struct{ name, s string }{
	{"plain", visa},
	{"single spaces", groups(visa, " ")},
	{"double spaces", groups(visa, "  ")},
	{"dots", groups(visa, ".")},
	{"slashes", groups(visa, "/")},
	{"underscores", groups(visa, "_")},
	{"commas", groups(visa, ",")},
	{"hyphens", groups(visa, "-")},
	{"tabs", groups(visa, "\t")},
	{"newlines", groups(visa, "\r\n")},
	{"NBSP", groups(visa, "\u00a0")},
	{"narrow NBSP", groups(visa, "\u202f")},
	{"ideographic space", groups(visa, "\u3000")},
	{"zero-width spaces between groups", groups(visa, "\u200b")},
	{"zero-width space between every digit", strings.Join(strings.Split(visa, ""), "\u200b")},
	{"zero-width joiner and space", groups(visa, "\u200d ")},
	{"soft hyphens", groups(visa, "\u00ad")},
	{"byte order marks", groups(visa, "\ufeff")},
	{"combining marks", strings.Join(strings.Split(visa, ""), "\u0301")},
	{"space, dash, space", groups(visa, " - ")},
	{"pipes", groups(visa, "|")},
	{"full-width digits", toScript(visa, '０')},
	{"full-width digits and spaces", toScript(groups(visa, "　"), '０')},
	{"Arabic-Indic digits", toScript(visa, '٠')},
	{"Arabic-Indic digits grouped", toScript(groups(visa, " "), '٠')},
	{"extended Arabic-Indic digits", toScript(visa, '۰')},
	{"Devanagari digits", toScript(visa, '०')},
	{"Bengali digits", toScript(visa, '০')},
	{"Thai digits", toScript(visa, '๐')},
	{"mathematical bold digits", toScript(visa, '𝟎')},
	{"mixed scripts", "٤١١١ ११११ １１１１ 1111"},
	{"circled digits", "④①①①①①①①①①①①①①①①"},
	{"PAN, expiry and CVV in one run", visa + "1227" + "123"},
	{"PAN, long expiry and CVV in one run", visa + "122027" + "1234"},
	{"PAN in a sentence", "please charge card " + groups(visa, " ") + " exp 12/27"},
	{"description of issue 12", "4111,1111,1111,1111"},
	{"PAN, then expiry and CVV grouped", groups(visa, " ") + " 12/27 123"},
	{"Visa 19 digits", "4111111111111111110"},
	{"Mastercard", "5555 5555 5555 4444"},
	{"Mastercard 2-series", "2223003122003222"},
	{"American Express, 4-6-5", "3782 822463 10005"},
	{"Discover", "6011111111111117"},
	{"JCB", "3530111333300000"},
	{"Diners Club, 14 digits", "3622 720627 1667"},
	{"UnionPay, 18 digits", "620000000000000005"},
	{"UnionPay 81", "8123456789012340"},
	{"inside JSON-ish text", `{"card":"` + visa + `"}`},
	// Issue 19: beside a short hexadecimal word, which the rule for UUIDs used to excuse.
	{"issue 19 description", "card 4111 1111 1111 1111 a1"},
	{"issue 19 metadata", "5555555555554444-c0ffee1"},
	{"issue 19 customer id", "1a 378282246310005"},
	{"issue 19 token", "4111111111111111-a1"},
	{"issue 19 Idempotency-Key", "4111111111111111 1a"},
	{"issue 19 X-Request-Id", "req-" + visa + "-a1"},
	{"issue 19 path id", "ch_" + visa + "-a1"},
	{"beside a hex word on both sides", "deadbeef-" + groups(visa, "-") + "-c0ffee"},
	{"beside a long hex word", "8663c8b8e0804333 " + visa},
	{"beside a UUID", visa + "-550e8400-e29b-41d4-a716-446655440000"},
	{"after a UUID", "550e8400-e29b-41d4-a716-446655440000-" + visa},
	{"between UUIDs", "550e8400-e29b-41d4-a716-446655440000 " + visa + " 8663c8b8-e080-4333-9682-642577993312"},
	{"a UUID of digits only is digits", "41111111-1111-1111-1111-000000000000"},
	{"one word short of a UUID", "8663c8b8-e080-4333-9682-6425779933121"},
	{"a UUID's shape, joined by spaces", "a663c8b8 e080 4111 1111 1111 111111111111"},
	{"a UUID's shape, joined by dots", "a663c8b8.e080.4111.1111.1111.111111111111"},
	{"Amex beside a hex word, 4-6-5", "3782 822463 10005 beef"},
	{"Mastercard beside hex words", "cafe 5555 5555 5555 4444 face"},
	{"beside a hex word, full-width", toScript(visa, '０') + "-ａ１"},
}

func TestContainsFindsEveryForm(t *testing.T) {
	for _, tc := range issueForms {
		t.Run(tc.name, func(t *testing.T) {
			if !Contains(tc.s) {
				t.Errorf("Contains(%q) = false, want true", tc.s)
			}
		})
	}
}

func TestContainsPassesWhatIsNotACardNumber(t *testing.T) {
	cases := []struct{ name, s string }{
		{"empty", ""},
		{"a token", "tok_visa"},
		{"fails Luhn", "4111111111111112"},
		{"12 digits", "411111111116"},
		{"no network starts with 9 but Troy and Humo", "9111111111111111111"},
		{"letters between groups", "4111 x 1111 y 1111 z 1111"},
		{"letters in the run", "4111a111111111111"},
		{"UATP, left out", "100000000000008"},
		{"Visa no longer issues 13 digits", "4111111111119"},
		{"a window in the middle of a group", "9" + visa + "9"},
		{"a window at the end of a group", "9" + visa},
		{"unix milliseconds", "1715000000000"},
		{"two unix milliseconds with a comma", "1715000000000,1715000000123"},
		{"unix microseconds", "1715000000000123"},
		{"date-time with milliseconds", "2024-05-06 10:30:45.123"},
		{"date-time with microseconds", "2025-12-31 23:59:59.999999"},
		{"UUID", "550e8400-e29b-41d4-a716-446655440000"},
		// A valid Visa number by chance in its 4-4-4-12 words: the shape excuses it.
		{"UUID holding a Visa number", "8663c8b8-e080-4333-9682-642577993312"},
		{"UUID uppercase", "8663C8B8-E080-4333-9682-642577993312"},
		{"UUID in braces", "{8663c8b8-e080-4333-9682-642577993312}"},
		{"UUID as a URN", "urn:uuid:8663c8b8-e080-4333-9682-642577993312"},
		{"UUID after a prefix", "order-1001-8663c8b8-e080-4333-9682-642577993312"},
		{"two UUIDs", "8663c8b8-e080-4333-9682-642577993312/8663c8b8-e080-4333-9682-642577993312"},
		{"MongoDB ObjectId", "507f1f77bcf86cd799439011"},
		{"SHA-1", "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
		{"ULID", "01ARZ3NDEKTSV4RRFFQ69G5FAV"},
		{"Amazon-style order", "112-7654321-1234567"},
		// 4111111111111111 is there, but it starts inside the group 94111111111111 and leaves it
		{"a window starting inside a group stays in it", "94111111111111,111"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if m, ok := find(tc.s); ok {
				t.Errorf("Contains(%q) found %s %s", tc.s, m.network, m.digits)
			}
		})
	}
}

// TestContainsAgreesWithTheReferenceOnTheForms keeps the fuzz target's reference honest: it
// finds what the detector finds on the table above.
func TestContainsAgreesWithTheReferenceOnTheForms(t *testing.T) {
	for _, tc := range issueForms {
		if !reference(tc.s) {
			t.Errorf("reference(%q) = false", tc.s)
		}
	}
}

// TestDigitRanges checks the assumption digitValue rests on against this Go's Unicode tables:
// each range of decimal digits holds whole scripts of ten, with stride 1.
func TestDigitRanges(t *testing.T) {
	for _, r := range digitRanges {
		if r.Stride != 1 || (r.Hi-r.Lo+1)%10 != 0 {
			t.Errorf("Nd range %U-%U stride %d: not whole runs of ten", r.Lo, r.Hi, r.Stride)
		}
	}
	known := map[rune]byte{
		'0': 0, '9': 9, '٠': 0, '٤': 4, '۹': 9, '०': 0, '४': 4, '৭': 7, '๓': 3, '０': 0, '４': 4,
		'𝟎': 0, '𝟒': 4, '𝟿': 9, '᠕': 5, '߂': 2,
	}
	for r, want := range known {
		if got, ok := digitValue(r); !ok || got != want {
			t.Errorf("digitValue(%q) = %d, %v; want %d", r, got, ok, want)
		}
	}
	for _, r := range []rune{'a', '²', '½', 'Ⅻ', ' ', unicode.MaxRune} {
		if _, ok := digitValue(r); ok {
			t.Errorf("digitValue(%q) reads a digit: only category Nd counts (NFKC first turns ² into 2)", r)
		}
	}
}

// TestIssuerRanges checks the table: bounds of one length, lo <= hi, lengths from 12 to 19.
func TestIssuerRanges(t *testing.T) {
	for _, r := range issuerRanges {
		if len(r.lo) != len(r.hi) || r.lo > r.hi || len(r.lo) > 6 {
			t.Errorf("%s %s-%s: bounds must be of one length (at most 6 digits) and ordered", r.network, r.lo, r.hi)
		}
		for _, n := range r.lengths {
			if n < 12 || n > MaxDigits {
				t.Errorf("%s %s-%s: length %d", r.network, r.lo, r.hi, n)
			}
		}
	}
}
