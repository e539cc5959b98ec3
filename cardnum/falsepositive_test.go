package cardnum

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The kinds of caller ids and values the false-positive rates of the package documentation
// are measured on. Each draws from r, so that a seed repeats the numbers.

func uuidV4(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

func uuidV7(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	ms := uint64(unixMillis(r))
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// ulid is 48 bits of milliseconds and 80 random bits in Crockford's base32, 26 characters.
func ulid(r *rand.Rand) string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	ms := uint64(unixMillis(r))
	out := make([]byte, 26)
	for i := 9; i >= 0; i-- {
		out[i] = alphabet[ms&31]
		ms >>= 5
	}
	for i := 10; i < 26; i++ {
		out[i] = alphabet[r.IntN(32)]
	}
	return string(out)
}

// unixMillis is a moment from 2001 to 2033 (13 digits), in milliseconds.
func unixMillis(r *rand.Rand) int64 {
	lo := time.Date(2001, 9, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
	hi := time.Date(2033, 5, 18, 0, 0, 0, 0, time.UTC).UnixMilli()
	return lo + r.Int64N(hi-lo)
}

// orderNumber is one of the order-number formats storefronts use.
func orderNumber(r *rand.Rand) string {
	year := 2020 + r.IntN(15)
	switch r.IntN(10) {
	case 0:
		return fmt.Sprintf("ORD-%06d", r.IntN(1_000_000))
	case 1:
		return fmt.Sprintf("#%d", 1001+r.IntN(10_000_000)) // Shopify
	case 2:
		return fmt.Sprintf("%09d", r.IntN(1_000_000_000)) // Magento
	case 3:
		return fmt.Sprintf("%d", 10_000_000+r.Int64N(999_990_000_000)) // 8 to 12 digits
	case 4:
		return fmt.Sprintf("%d%02d%02d-%04d", year, 1+r.IntN(12), 1+r.IntN(28), r.IntN(10_000))
	case 5:
		return fmt.Sprintf("INV-%d-%06d", year, r.IntN(1_000_000))
	case 6:
		return fmt.Sprintf("%d%02d%02d-%06d", year, 1+r.IntN(12), 1+r.IntN(28), r.IntN(1_000_000))
	case 7:
		return fmt.Sprintf("PO/%d/%02d/%05d", year, 1+r.IntN(12), r.IntN(100_000))
	case 8:
		return fmt.Sprintf("SO%010d", r.Int64N(10_000_000_000))
	default:
		return fmt.Sprintf("%d%02d%02d%02d%02d%02d", year, 1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60))
	}
}

// amazonOrder is an order number as Amazon writes them, ddd-ddddddd-ddddddd: 17 digits, the
// shape of a card number.
func amazonOrder(r *rand.Rand) string {
	return fmt.Sprintf("%03d-%07d-%07d", r.IntN(1000), r.IntN(10_000_000), r.IntN(10_000_000))
}

// dateTimeFraction is a date-time as Python's str(datetime) writes it, with milliseconds or
// microseconds.
func dateTimeFraction(r *rand.Rand) string {
	t := time.UnixMilli(unixMillis(r)).UTC()
	if r.IntN(2) == 0 {
		return t.Format("2006-01-02 15:04:05.000")
	}
	return t.Add(time.Duration(r.IntN(1000)) * time.Microsecond).Format("2006-01-02 15:04:05.000000")
}

// hexID is a hexadecimal id without separators, as hashes and trace ids are written: 16
// (a span id), 24 (a MongoDB ObjectId), 32 (a UUID without hyphens, a trace id), 40 (SHA-1) or
// 64 (SHA-256) lowercase hexadecimal digits.
func hexID(r *rand.Rand) string {
	lengths := []int{16, 24, 32, 40, 64}
	b := make([]byte, lengths[r.IntN(len(lengths))]/2)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return hex.EncodeToString(b)
}

// traceparent is a W3C trace context header: version, trace id, parent id and flags joined by
// hyphens.
func traceparent(r *rand.Rand) string {
	var trace [16]byte
	var parent [8]byte
	for i := range trace {
		trace[i] = byte(r.Uint32())
	}
	for i := range parent {
		parent[i] = byte(r.Uint32())
	}
	return "00-" + hex.EncodeToString(trace[:]) + "-" + hex.EncodeToString(parent[:]) + "-01"
}

// uuidAmongWords is a UUID as storefronts write it in keys and metadata: uppercase or in
// braces, after a prefix, or beside an order number.
func uuidAmongWords(r *rand.Rand) string {
	u := uuidV4(r)
	switch r.IntN(4) {
	case 0:
		return strings.ToUpper(u)
	case 1:
		return "{" + u + "}"
	case 2:
		return "order-" + fmt.Sprint(r.IntN(1_000_000)) + "-" + u
	default:
		return "urn:uuid:" + u + " attempt " + fmt.Sprint(1+r.IntN(9))
	}
}

// anyWindow is the policy without the IIN rule, for comparison: any window of 13 to 19
// digits (under the same grouping rules) that passes Luhn.
func anyWindow(s string) bool {
	for _, d := range runs(s) {
		for i := range d.digits {
			for n := MinDigits; n <= MaxDigits && i+n <= len(d.digits); n++ {
				if d.window(i, n) && luhn(d.digits[i:i+n]) {
					return true
				}
			}
		}
	}
	return false
}

// TestFalsePositiveRates measures how often values that are not card numbers are taken for
// one, under this package's policy and under a plain "any Luhn-valid window", and holds the
// policy to bounds (the measured rates, with room): the table in the package documentation
// comes from this test's log (go test -run TestFalsePositiveRates -v ./cardnum).
func TestFalsePositiveRates(t *testing.T) {
	n := 100_000
	if testing.Short() || raceEnabled {
		n = 10_000
	}
	kinds := []struct {
		name string
		gen  func(*rand.Rand) string
		max  float64 // the highest rate (fraction) this policy may show
	}{
		{"UUID v4", uuidV4, 0.00002},
		{"UUID v7", uuidV7, 0.00002},
		{"ULID", ulid, 0.00002},
		{"unix milliseconds", func(r *rand.Rand) string { return fmt.Sprint(unixMillis(r)) }, 0},
		{"unix microseconds", func(r *rand.Rand) string { return fmt.Sprint(unixMillis(r)*1000 + r.Int64N(1000)) }, 0},
		{"order numbers (mixed formats)", orderNumber, 0.002},
		{"Amazon-style order numbers", amazonOrder, 0.06},
		{"unix nanoseconds", func(r *rand.Rand) string { return fmt.Sprint(unixMillis(r)*1_000_000 + r.Int64N(1_000_000)) }, 0},
		{"date-times with fractions", dateTimeFraction, 0},
		{"hex ids (16 to 64 hex digits)", hexID, 0.0005},
		{"traceparent", traceparent, 0.0003},
		{"UUIDs among words", uuidAmongWords, 0.00002},
		{"random 16-digit numbers", func(r *rand.Rand) string { return fmt.Sprintf("%016d", r.Int64N(1e16)) }, 0.05},
	}
	for _, k := range kinds {
		r := rand.New(rand.NewPCG(12, uint64(len(k.name))))
		policy, plain := 0, 0
		var example string
		for range n {
			s := k.gen(r)
			if Contains(s) {
				policy++
				example = s
			}
			if anyWindow(s) {
				plain++
			}
		}
		rate := float64(policy) / float64(n)
		t.Logf("%-32s this policy %.4f%%  any window %.4f%%  (%d values; e.g. %q)", k.name, 100*rate,
			100*float64(plain)/float64(n), n, example)
		if rate > k.max {
			t.Errorf("%s: %.4f%% taken for card numbers, more than the %.4f%% allowed", k.name, 100*rate, 100*k.max)
		}
	}
}
