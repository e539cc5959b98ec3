package cardnum

// issuerRange is a range of issuer identification numbers (the leading digits of a card
// number) and the lengths of the numbers its network issues under them.
type issuerRange struct {
	network string
	// lo and hi bound the prefix, inclusive; both have the same number of digits.
	lo, hi  string
	lengths []int
}

// lengthsFrom is every length from lo to hi.
func lengthsFrom(lo, hi int) []int {
	var l []int
	for n := lo; n <= hi; n++ {
		l = append(l, n)
	}
	return l
}

// issuerRanges are the card networks' IIN ranges and the lengths each issues, from the table of
// the Wikipedia article "Payment card number" (section "Issuer identification number (IIN)"),
// as it stood in February 2026. A window of digits counts as a card number only when its
// prefix is in one of these ranges and its length is one that range issues; see the package
// documentation for why, and for what is left out (UATP, GPN's 1946, Visa's 13 digits and
// Carte Blanche's 14).
//
// Ranges of different networks overlap (Discover's 65 and RuPay's 65, say): a window matches
// when any range admits it.
var issuerRanges = []issuerRange{
	{"Visa", "4", "4", []int{16, 19}}, // and 13 once: none left in use
	{"Mastercard", "51", "55", []int{16}},
	{"Mastercard", "2221", "2720", []int{16}},
	{"American Express", "34", "34", []int{15}},
	{"American Express", "37", "37", []int{15}},
	{"Discover", "6011", "6011", lengthsFrom(16, 19)},
	{"Discover", "644", "649", lengthsFrom(16, 19)},
	{"Discover", "65", "65", lengthsFrom(16, 19)},
	{"Discover", "622126", "622925", lengthsFrom(16, 19)},
	{"Diners Club", "36", "36", lengthsFrom(14, 19)},
	{"Diners Club", "300", "305", lengthsFrom(16, 19)}, // and 14 (Carte Blanche) once
	{"Diners Club", "3095", "3095", lengthsFrom(16, 19)},
	{"Diners Club", "38", "39", lengthsFrom(16, 19)},
	{"JCB", "3528", "3589", lengthsFrom(16, 19)},
	{"UnionPay", "62", "62", lengthsFrom(16, 19)},
	{"UnionPay", "8100", "8171", lengthsFrom(16, 19)},
	{"Maestro", "5018", "5018", lengthsFrom(12, 19)},
	{"Maestro", "5020", "5020", lengthsFrom(12, 19)},
	{"Maestro", "5038", "5038", lengthsFrom(12, 19)},
	{"Maestro", "5893", "5893", lengthsFrom(12, 19)},
	{"Maestro", "6304", "6304", lengthsFrom(12, 19)},
	{"Maestro", "6759", "6759", lengthsFrom(12, 19)},
	{"Maestro", "6761", "6763", lengthsFrom(12, 19)},
	{"Mir", "2200", "2204", lengthsFrom(16, 19)},
	{"BORICA", "2205", "2205", []int{16}},
	{"RuPay", "60", "60", []int{16}},
	{"RuPay", "65", "65", []int{16}},
	{"RuPay", "81", "82", []int{16}},
	{"RuPay", "508", "508", []int{16}},
	{"RuPay", "353", "353", []int{16}},
	{"RuPay", "356", "356", []int{16}},
	{"Troy", "9792", "9792", []int{16}},
	{"Verve", "506099", "506198", []int{16, 18, 19}},
	{"Verve", "507865", "507964", []int{16, 18, 19}},
	{"Verve", "650002", "650027", []int{16, 18, 19}},
	{"InterPayment", "636", "636", lengthsFrom(16, 19)},
	{"InstaPayment", "637", "639", []int{16}},
	{"Dankort", "5019", "5019", []int{16}},
	{"UzCard", "8600", "8600", []int{16}},
	{"UzCard", "5614", "5614", []int{16}},
	{"Humo", "9860", "9860", []int{16}},
	{"GPN", "50", "50", []int{16, 18, 19}},
	{"GPN", "56", "56", []int{16, 18, 19}},
	{"GPN", "58", "58", []int{16, 18, 19}},
	{"GPN", "60", "63", []int{16, 18, 19}},
}

// compiledRange is an issuerRange as the scan uses it: the prefix as a number, and the
// lengths as a bit set (bit n: length n).
type compiledRange struct {
	digits  int
	lo, hi  int
	lengths uint32
	network string
}

var compiledRanges = compile(issuerRanges)

func compile(ranges []issuerRange) []compiledRange {
	out := make([]compiledRange, 0, len(ranges))
	for _, r := range ranges {
		c := compiledRange{digits: len(r.lo), lo: atoi(r.lo), hi: atoi(r.hi), network: r.network}
		for _, n := range r.lengths {
			c.lengths |= 1 << n
		}
		out = append(out, c)
	}
	return out
}

func atoi(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		n = n*10 + int(s[i]-'0')
	}
	return n
}

// lengthsAt is the set of lengths (bit n: length n) that some network issues for a number
// starting with d, which holds at least the six digits the longest prefix needs (fewer when
// the run ends sooner; a range whose prefix does not fit then cannot match).
func lengthsAt(d []byte) uint32 {
	var set uint32
	for _, r := range compiledRanges {
		if len(d) < r.digits {
			continue
		}
		p := 0
		for _, x := range d[:r.digits] {
			p = p*10 + int(x)
		}
		if p >= r.lo && p <= r.hi {
			set |= r.lengths
		}
	}
	return set
}

// networkOf names a network that issues numbers like d, for tests and messages; "" for none.
func networkOf(d []byte) string {
	for _, r := range compiledRanges {
		if len(d) < r.digits || r.lengths&(1<<len(d)) == 0 {
			continue
		}
		p := 0
		for _, x := range d[:r.digits] {
			p = p*10 + int(x)
		}
		if p >= r.lo && p <= r.hi {
			return r.network
		}
	}
	return ""
}
