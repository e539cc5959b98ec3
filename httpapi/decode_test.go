package httpapi

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

const validCharge = `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`

func TestDecodeChargeValid(t *testing.T) {
	in, errs, err := decodeCharge([]byte(`{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},
		"country":"MY","customer_id":"cus_1","description":"order 42","capture":false,"gateway":"ding","metadata":{"order":"42"}}`))
	if err != nil {
		t.Fatalf("valid charge refused: %v %v", err, errs)
	}
	if in.Amount != 1999 || in.Currency != "USD" || in.PaymentMethod.Token != "tok_visa" || in.Capture ||
		in.Country != "MY" || in.Gateway != "ding" || in.Metadata["order"] != "42" {
		t.Errorf("decoded %+v", in)
	}
	in, _, err = decodeCharge([]byte(validCharge))
	if err != nil || !in.Capture {
		t.Errorf("capture must default to true: %+v %v", in, err)
	}
	if _, _, err := decodeCharge([]byte(`{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"country":null}`)); err != nil {
		t.Errorf("null for an optional field must read as absent: %v", err)
	}
}

// bigMetadata is n metadata pairs "k<i>" with values of size characters, as JSON members.
func bigMetadata(n, size int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`"k%d":"%s"`, i, strings.Repeat("v", size)))
	}
	return strings.Join(parts, ",")
}

func TestDecodeChargeRefusals(t *testing.T) {
	const card = "4242424242424242"
	cases := []struct {
		name, body, field string
	}{
		{"capture is a string", `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"t"},"capture":"true"}`, "capture"},
		{"amount is a string", `{"amount":"1999","currency":"USD","payment_method":{"type":"card","token":"t"}}`, "amount"},
		{"amount has a fraction", `{"amount":1999.5,"currency":"USD","payment_method":{"type":"card","token":"t"}}`, "amount"},
		{"amount in exponent form", `{"amount":1e3,"currency":"USD","payment_method":{"type":"card","token":"t"}}`, "amount"},
		{"amount is zero", `{"amount":0,"currency":"USD","payment_method":{"type":"card","token":"t"}}`, "amount"},
		{"amount above 10^12", `{"amount":1000000000001,"currency":"USD","payment_method":{"type":"card","token":"t"}}`, "amount"},
		{"amount overflows int64", `{"amount":99999999999999999999,"currency":"USD","payment_method":{"type":"card","token":"t"}}`, "amount"},
		{"unknown field", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"colour":"blue"}`, "colour"},
		{"field in another case", `{"Amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"}}`, "Amount"},
		{"currency lower case", `{"amount":1,"currency":"usd","payment_method":{"type":"card","token":"t"}}`, "currency"},
		{"country too long", `{"amount":1,"currency":"USD","country":"MYS","payment_method":{"type":"card","token":"t"}}`, "country"},
		{"trailing data", validCharge + ` trailing`, "(body)"},
		{"two objects", validCharge + validCharge, "(body)"},
		{"duplicate key", `{"amount":1999,"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"}}`, "amount"},
		{"payment_method missing", `{"amount":1999,"currency":"USD"}`, "payment_method"},
		{"token empty", `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":""}}`, "payment_method.token"},
		{"type not card", `{"amount":1999,"currency":"USD","payment_method":{"type":"bank","token":"t"}}`, "payment_method.type"},
		{"description too long", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"description":"` + strings.Repeat("d", 501) + `"}`, "description"},
		{"metadata value not a string", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"metadata":{"n":1}}`, "metadata.n"},
		{"not an object", `[1,2]`, "(body)"},
		{"empty body", ``, "(body)"},
		{"broken JSON", `{"amount":`, "(body)"},
		{"card number field", `{"amount":1,"currency":"USD","payment_method":{"type":"card","number":"` + card + `"}}`, "payment_method.number"},
		{"card number in metadata", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"metadata":{"note":"` + card + `"}}`, "metadata.note"},
		{"grouped card number", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"description":"card 4242 4242 4242 4242"}`, "description"},
		{"card number as a number", `{"amount":` + card + `,"currency":"USD","payment_method":{"type":"card","token":"t"}}`, "amount"},
		{"currency empty", `{"amount":1,"currency":"","payment_method":{"type":"card","token":"t"}}`, "currency"},
		{"currency not in ISO 4217", `{"amount":1,"currency":"ZZZ","payment_method":{"type":"card","token":"t"}}`, "currency"},
		{"currency no currency", `{"amount":1,"currency":"XXX","payment_method":{"type":"card","token":"t"}}`, "currency"},
		{"type empty", `{"amount":1,"currency":"USD","payment_method":{"type":"","token":"t"}}`, "payment_method.type"},
		{"the FuzzDecodeCharge find of issue 12", `{"amount":1,"currency":"","payment_method":{"type":"","token":"0"}}`, "payment_method.type"},
		{"token with a space", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"tok visa"}}`, "payment_method.token"},
		{"token with a quote", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"tok'1"}}`, "payment_method.token"},
		{"token not ASCII", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"tok_vis\u00e4"}}`, "payment_method.token"},
		{"token 256 characters", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"` + strings.Repeat("t", 256) + `"}}`, "payment_method.token"},
		{"metadata key 41 characters", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"metadata":{"` + strings.Repeat("k", 41) + `":"v"}}`, "metadata"},
		{"metadata value 501 characters", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"metadata":{"k":"` + strings.Repeat("v", 501) + `"}}`, "metadata.k"},
		{"metadata over 4096 bytes in all", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"metadata":{` + bigMetadata(9, 499) + `}}`, "metadata"},
		{"metadata of four-byte characters over 4096 bytes", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"metadata":{"k":"` + strings.Repeat("😀", 500) + `","l":"` + strings.Repeat("😀", 500) + `","m":"` + strings.Repeat("😀", 100) + `"}}`, "metadata"},
		{"card number as a key", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"metadata":{"` + card + `":"x"}}`, "metadata"},
		// Control characters, NUL first (PostgreSQL's text refuses it): in every text field,
		// alike whichever store is behind.
		{"NUL in the description", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"description":"order\u000042"}`, "description"},
		{"line break in the description", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"description":"order 42\nINFO forged"}`, "description"},
		{"escape in the customer id", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"customer_id":"cus\u001b[31m"}`, "customer_id"},
		{"C1 control in the description", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"description":"a\u0085b"}`, "description"},
		{"NUL in a metadata value", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"metadata":{"k":"v\u0000"}}`, "metadata.k"},
		{"NUL in a metadata key", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"metadata":{"k\u0000":"v"}}`, "metadata"},
		{"tab in the token", `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"tok\tvisa"}}`, "payment_method.token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errs, err := decodeCharge([]byte(tc.body))
			if err == nil {
				t.Fatal("accepted")
			}
			found := false
			for _, fe := range errs {
				if fe.Message == "" {
					t.Errorf("field error without a message: %+v", fe)
				}
				if strings.Contains(fe.Field+fe.Message, card) || strings.Contains(fe.Field+fe.Message, "4242 4242") {
					t.Errorf("field error repeats the card number: %+v", fe)
				}
				if fe.Field == tc.field {
					found = true
				}
			}
			if !found {
				t.Errorf("want an error on field %q; got %+v", tc.field, errs)
			}
		})
	}
}

// TestDecodeChargeCapsItsErrors: a body of thousands of unknown members gets its first problems
// and a word that there are more, not an answer as long as itself.
func TestDecodeChargeCapsItsErrors(t *testing.T) {
	var members []string
	for i := range 4000 {
		members = append(members, fmt.Sprintf(`"u%d":1`, i))
	}
	body := `{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},` + strings.Join(members, ",") + `}`
	_, errs, err := decodeCharge([]byte(body))
	if err == nil {
		t.Fatal("accepted")
	}
	if len(errs) != maxFieldErrors+1 || errs[0].Field != "u0" || errs[maxFieldErrors].Field != "(body)" {
		t.Errorf("%d field errors (first %+v, last %+v); want the first %d and one saying there are more", len(errs), errs[0], errs[len(errs)-1], maxFieldErrors)
	}
}

// TestCurrencies: the table of ISO 4217 codes takes currencies in use and refuses the codes
// that are no money one charges a card in.
func TestCurrencies(t *testing.T) {
	for _, code := range []string{"USD", "EUR", "MYR", "SGD", "JPY", "IDR", "THB", "XOF", "XCG", "BHD"} {
		if _, errs, err := decodeCharge([]byte(`{"amount":1,"currency":"` + code + `","payment_method":{"type":"card","token":"t"}}`)); err != nil {
			t.Errorf("%s refused: %v", code, errs)
		}
	}
	for _, code := range []string{"ZZZ", "XXX", "XTS", "XAU", "XDR", "BOV", "CLF", "USN", "ANG", "BGN", "HRK", "VEF", "usd", "US", "USDD"} {
		_, errs, err := decodeCharge([]byte(`{"amount":1,"currency":"` + code + `","payment_method":{"type":"card","token":"t"}}`))
		if err == nil || len(errs) != 1 || errs[0].Field != "currency" {
			t.Errorf("%s: got %v, want one error on currency", code, errs)
		}
	}
	for code := range currencies {
		if len(code) != 3 || strings.ToUpper(code) != code {
			t.Errorf("table entry %q is not an upper-case three-letter code", code)
		}
	}
}

func FuzzDecodeCharge(f *testing.F) {
	f.Add([]byte(validCharge))
	f.Add([]byte(`{"amount":1999.5}`))
	f.Add([]byte(`{"a":{"b":{"c":[1,2,{"d":"4242424242424242"}]}}}`))
	f.Add([]byte(`{"amount":1,"amount":2}`))
	f.Add([]byte(`{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"metadata":{"k":"4111\u00a01111\u00a01111\u00a01111"}}`))
	f.Add([]byte(`{"amount":1,"currency":"USD","payment_method":{"type":"card","token":"t"},"description":"\ud83d\ude00 \\ud800 \udc00"}`))
	f.Add([]byte("{\"amount\":1,\"description\":\"caf\xe9\"}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		in, errs, err := decodeCharge(body)
		if err == nil {
			if len(errs) != 0 || in.Amount < 1 || in.Amount > maxAmount || !currencies[in.Currency] ||
				in.PaymentMethod.Type != "card" || !tokenPattern.MatchString(in.PaymentMethod.Token) {
				t.Fatalf("accepted an invalid charge: %+v", in)
			}
			return
		}
		if len(errs) == 0 {
			t.Fatal("refused without a field error")
		}
	})
}

// FuzzParseJSON holds parseJSON's walk of a well-formed body to the token-by-token walk it
// replaced (parseTokens): the same value, or the same refusal in the same words, for any body.
func FuzzParseJSON(f *testing.F) {
	for _, seed := range []string{
		validCharge, `{}`, `[]`, `[[],{}]`, `{"a":[]}`, `null`, `true`, `false`, `-0.5e+3`, `"x"`, `  {"a" : 1 , "b":[ 1 ,2 ] }  `,
		`{"amount":1,"amount":2}`, `{"a":{"b":1,"b":2}}`, `{"a":1,"a":2,`, `{"a":1} {}`, `{"a":1} x`, `{"a":1}]`, ` `, ``,
		`{"\u0061":1,"a":2}`, `{"k":"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"}`, `[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]`,
		`[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]`, `{"a":[{"b":{"c":[1e3,0,-1,1.25]}}]}`, "{\"a\":\"caf\xe9\"}", `{"a":1e400}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) || loneSurrogate(body) {
			return // refused before either walk (TestTextThatIsNoCharacterRefused)
		}
		got, gotErr := parseJSON(body)
		want, wantErr := parseTokens(body)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("parseJSON(%q) error %v; the token walk's %v", body, gotErr, wantErr)
		}
		var gotDup, wantDup *duplicateKeyError
		if errors.As(gotErr, &gotDup) != errors.As(wantErr, &wantDup) || gotDup != nil && gotDup.key != wantDup.key {
			t.Fatalf("parseJSON(%q) error %#v; the token walk's %#v", body, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("parseJSON(%q) = %#v; the token walk made %#v", body, got, want)
		}
	})
}

// FuzzValidToken holds validToken to tokenPattern, the rule it checks without a regexp.
func FuzzValidToken(f *testing.F) {
	for _, seed := range []string{"tok_visa", "", "pm_1N.x:y-z", "tok visa", "tok\n", "tok_visa\n", "é", strings.Repeat("a", 255), strings.Repeat("a", 256), "a/b"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validToken(s), tokenPattern.MatchString(s); got != want {
			t.Fatalf("validToken(%q) = %v; tokenPattern says %v", s, got, want)
		}
	})
}

// TestTextThatIsNoCharacterRefused: bytes that are not UTF-8, and an escaped half of a surrogate
// pair, were stored as U+FFFD with a 201: the charge kept other text than was sent. They are a
// 400 on the body now; a pair written as two escapes, and text that only looks like an escape,
// pass.
func TestTextThatIsNoCharacterRefused(t *testing.T) {
	withDescription := func(d string) []byte {
		return []byte(`{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"description":"` + d + `"}`)
	}
	for _, tc := range []struct {
		name    string
		body    []byte
		refused bool
	}{
		{"a byte that is not UTF-8", withDescription("caf\xe9"), true},
		{"a truncated UTF-8 sequence", withDescription("\xe2\x82"), true},
		{"a UTF-8 encoded surrogate", withDescription("\xed\xa0\x80"), true},
		{"a high surrogate alone", withDescription(`\ud83d`), true},
		{"a high surrogate before another escape", withDescription(`\ud83d\u0041`), true},
		{"a low surrogate alone", withDescription(`\ude00`), true},
		{"two high surrogates", withDescription(`\ud83d\ud83d`), true},
		{"a surrogate in a metadata key", []byte(`{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"metadata":{"\udc00":"x"}}`), true},
		{"a pair of escapes", withDescription(`smile \ud83d\ude00`), false},
		{"the character itself", withDescription("smile 😀 café"), false},
		{"an escaped backslash before u", withDescription(`C:\\ud800`), false},
		{"an escaped quote then an escape", withDescription(`say \"hi\" \u00e9`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs, err := decodeCharge(tc.body)
			if !tc.refused {
				if err != nil {
					t.Fatalf("refused: %v %+v", err, errs)
				}
				return
			}
			if err == nil || len(errs) != 1 || errs[0].Field != "(body)" {
				t.Fatalf("decodeCharge = %+v, %v; want one error on (body)", errs, err)
			}
		})
	}
}
