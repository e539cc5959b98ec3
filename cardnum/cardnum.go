// Package cardnum finds card numbers (primary account numbers, PANs) in text, so that
// payrouter can refuse every caller-supplied string that holds one: payrouter takes card
// tokens only, and a card number it stored, logged or echoed would bring its database, logs
// and responses into the scope of PCI DSS.
//
// # What counts as a card number
//
// Contains reports whether a string holds a window of 13 to 19 digits that
//
//   - passes the Luhn check,
//   - starts with the issuer identification number (IIN) of a card network and has a length
//     that network issues (issuerRanges: Visa 4 with 16 or 19 digits, Mastercard 51-55 and
//     2221-2720 with 16, American Express 34 and 37 with 15, and Discover, Diners Club, JCB,
//     UnionPay, Maestro, Mir, RuPay, Troy, Verve, GPN, ...),
//
// after the string is
//
//   - normalised to NFKC (full-width digits, superscripts and circled digits become ASCII
//     digits; NBSP and the other spaces become a space),
//   - read with every Unicode decimal digit as its value (Arabic-Indic ٤١١١, Devanagari ४१११,
//     Bengali, Thai, mathematical digits, ...: all of Unicode category Nd),
//   - stripped of invisible characters (format characters such as zero-width spaces, joiners,
//     soft hyphens and the byte order mark, and combining marks), dropped as if absent,
//   - cut into words (letters and digits) at every other character: spaces, tabs, newlines,
//     dots, commas, slashes, underscores, hyphens, symbols, ... are all separators, of any
//     number and mix. Consecutive words of digits only make one run of digits, each word a
//     group of it ("4111  1111.1111/1111"); a word with letters ends the run, and each group
//     of digits inside such a word is a run of its own ("card4111111111111111exp").
//
// A window starts at the first digit of a group and may span the groups that follow; the
// digits after it do not matter, so a PAN followed by its expiry and CVV in one run of digits
// ("41111111111111111227123") is found.
//
// A UUID in its canonical form (five words of 8, 4, 4, 4 and 12 hexadecimal digits joined by
// single hyphens, with a letter a-f among them) counts as one word with letters, whatever its
// digits: in 8663c8b8-e080-4333-9682-642577993312 the digits 4333 9682 6425 7799 are a valid
// Visa number by chance. Nothing else is excused: a card number beside a word of any kind,
// hexadecimal or not ("4111111111111111-a1", "1a 378282246310005", "card 4111 1111 1111 1111
// a1", or beside a UUID) is found.
//
// # Why this policy, and what it costs
//
// A random run of 13 or more digits passes Luhn one time in ten, and the windows of a long run
// give it many chances: ids and timestamps that storefronts put in metadata and keys would be
// refused often. Three rules keep them out:
//
//   - the IIN ranges and lengths. They make every unix timestamp harmless until 2033 (in
//     seconds, milliseconds, microseconds or nanoseconds they start with 1), and every
//     date-time of this century (years 2000 to 2199 lie outside Mastercard's 2221-2720 and
//     Mir's 2200-2204). Left out for it: UATP (prefix 1, 15 digits: airline cards, which no
//     storefront gateway of payrouter takes) and GPN's 1946; also Visa's 13 digits and Carte
//     Blanche's 14, which no card in use has any more.
//   - windows start where a group starts, never inside one: a long run of digits has one
//     candidate start, not one per digit (with every start, one nanosecond timestamp in
//     seventeen was refused). A PAN glued after other digits ("12" + PAN) is not found.
//   - the UUID rule above. Until issue 19 it was broader: a run next to any word that mixed
//     digits with the letters a-f was skipped, so "4111111111111111-a1" passed. What sets a
//     UUID apart is its shape, not its letters; a hash or hex id has no separators, and the
//     groups of digits inside its one word are looked at on their own, as in any word.
//
// Measured by TestFalsePositiveRates on 100,000 random values of each kind (seeded, so the
// numbers repeat; the second column is the same policy without the IIN ranges):
//
//	                                     this policy    any Luhn-valid window
//	UUID v4                              0%             0%
//	UUID v7                              0%             0%
//	UUIDs among words (braces, URN, ...) 0%             0%
//	ULID                                 0%             0%
//	unix milliseconds                    0%             10%
//	unix microseconds                    0%             35%
//	unix nanoseconds                     0%             52%
//	date-times with fractions            0%             61%
//	order numbers (9 common formats)     0%             3.7%
//	hex ids (16 to 64 hex digits)        0.021%         0.44%
//	traceparent headers                  0.016%         0.49%
//	Amazon-style ddd-ddddddd-ddddddd     4.7%           52%
//	random 16-digit numbers              3.8%           34%
//
// The last two have the very shape of a card number, and one in twenty-five passes every
// check a real PAN passes: no detector can tell them apart. A storefront whose own ids are
// long digit strings should keep each run under 13 digits, or use UUIDs or ULIDs: a letter
// prefix ("ord_...") does not help, the digits after it are a run of their own.
//
// A hex id is refused when a group of 13 or more digits inside it is a card number by chance
// ("588819848316344933c37a152daa74f6"), about one in 5,000: its letters are no proof that the
// digits are not a card number glued to a word ("4111111111111111a1"). So is a traceparent
// whose ids hold such a group (16 digits of a parent id alone are digits too).
//
// # What it does not find
//
// A number split by letters ("4111 x 1111 ..."), preceded by other digits in one group, written
// in the shape of a UUID with a letter in it, spread over several strings, or encoded (base64,
// hex, words): no filter finds every encoding, and this one is for the forms a person or a
// careless integration produces. Numbers shorter than 13 digits (Maestro issues 12) and UATP
// numbers are not looked for.
package cardnum

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Lengths of a PAN (ISO/IEC 7812).
const (
	MinDigits = 13
	MaxDigits = 19
)

// Contains reports whether s holds something that looks like a card number (see the package
// documentation for what counts). It never fails: invalid UTF-8 reads as separators.
func Contains(s string) bool {
	_, ok := find(s)
	return ok
}

// match is a card number found: its digits and a network that issues it.
type match struct {
	digits  []byte
	network string
}

// find returns the first card number in s.
func find(s string) (match, bool) {
	if isASCII(s) && asciiDigits(s) < MinDigits {
		// Fewer than 13 digits: no run can be a card number, and most text a request carries
		// (tokens, currencies, descriptions) is screened without building its words. Not so a
		// string of other characters: NFKC turns one character into several digits ("⑽" is
		// "(10)").
		return match{}, false
	}
	for _, run := range runs(s) {
		if m, ok := run.find(); ok {
			return m, true
		}
	}
	return match{}, false
}

// asciiDigits counts the digits 0-9 of s, the only ones an ASCII string has (digitValue).
func asciiDigits(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if '0' <= s[i] && s[i] <= '9' {
			n++
		}
	}
	return n
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// digitRun is a run of digits joined across separators: digits[i] is a digit's value, and
// groupEnd[i] the index just past the last digit of the group holding i (digits with nothing
// visible between them); i is a group's first digit when i == 0 or groupEnd[i-1] == i.
type digitRun struct {
	digits   []byte
	groupEnd []int
}

// addGroup appends a group of digits to the run.
func (d *digitRun) addGroup(g []byte) {
	d.digits = append(d.digits, g...)
	for range g {
		d.groupEnd = append(d.groupEnd, len(d.digits))
	}
}

// word is a stretch of letters and digits between separators: its groups of digits (split by
// its letters), whether it has letters, how many characters it has, whether all of them are
// ASCII hexadecimal digits (0-9 a-f A-F), and whether the separator before it is one hyphen.
type word struct {
	groups      [][]byte
	letters     bool
	n           int
	hexOnly     bool
	afterHyphen bool
}

// uuidShape is the lengths of the words of a UUID in its canonical form (RFC 9562: 8-4-4-4-12
// hexadecimal digits joined by hyphens).
var uuidShape = [...]int{8, 4, 4, 4, 12}

// uuidAt reports whether the words from i are a UUID in its canonical form: five words of 8, 4,
// 4, 4 and 12 hexadecimal digits joined by single hyphens, with a letter a-f in one of them.
//
// The shape, not the letters, is what sets a UUID apart from a card number beside a word: in
// "4111111111111111-a1" or "1a 378282246310005" the number stands next to a short word that
// is hexadecimal too. A UUID of digits only (one in a million) is read as digits.
func uuidAt(ws []word, i int) bool {
	if i+len(uuidShape) > len(ws) {
		return false
	}
	letters := false
	for k, n := range uuidShape {
		w := ws[i+k]
		if w.n != n || !w.hexOnly || k > 0 && !w.afterHyphen {
			return false
		}
		letters = letters || w.letters
	}
	return letters
}

// words splits s, normalised, into its words, invisible characters dropped.
func words(s string) []word {
	if !isASCII(s) {
		s = norm.NFKC.String(s)
	}
	var (
		out     []word
		cur     word
		inWord  bool
		inGroup bool
		seps    int  // separators since the last word
		hyphen  bool // and they are one hyphen
	)
	start := func() {
		if !inWord {
			cur = word{hexOnly: true, afterHyphen: len(out) > 0 && seps == 1 && hyphen}
			inWord, seps = true, 0
		}
		cur.n++
	}
	for _, r := range s {
		if v, ok := digitValue(r); ok {
			start()
			if !inGroup {
				cur.groups = append(cur.groups, nil)
			}
			cur.groups[len(cur.groups)-1] = append(cur.groups[len(cur.groups)-1], v)
			cur.hexOnly = cur.hexOnly && r <= '9'
			inGroup = true
			continue
		}
		switch {
		case invisible(r):
			// as if absent: the characters on either side stay together
		case unicode.IsLetter(r):
			start()
			cur.letters = true
			cur.hexOnly = cur.hexOnly && strings.ContainsRune("abcdefABCDEF", r)
			inGroup = false
		default:
			if inWord {
				out = append(out, cur)
				inWord, inGroup = false, false
			}
			seps++
			hyphen = r == '-'
		}
	}
	if inWord {
		out = append(out, cur)
	}
	return out
}

// runs splits s into its digit runs of at least MinDigits digits: consecutive words of digits
// only, joined across the separators between them, and on their own the groups of digits of a
// word with letters. A UUID in its canonical form is a word with letters of its own, whatever
// digits it holds: in 550e8400-e29b-41d4-a716-446655440000 the digits 41d4... and in
// 8663c8b8-e080-4333-9682-642577993312 the digits 4333 9682 6425 7799 (a valid Visa number by
// chance) are no card number.
func runs(s string) []digitRun {
	var (
		out []digitRun
		cur digitRun
	)
	keep := func(r digitRun) {
		if len(r.digits) >= MinDigits {
			out = append(out, r)
		}
	}
	ws := words(s)
	for i := 0; i < len(ws); i++ {
		if uuidAt(ws, i) {
			keep(cur)
			cur = digitRun{}
			i += len(uuidShape) - 1
			continue
		}
		w := ws[i]
		if !w.letters {
			cur.addGroup(w.groups[0])
			continue
		}
		keep(cur)
		cur = digitRun{}
		for _, g := range w.groups {
			var alone digitRun
			alone.addGroup(g)
			keep(alone)
		}
	}
	keep(cur)
	return out
}

// invisible reports whether r shows nothing by itself: a format character (zero-width space,
// joiners, soft hyphen, byte order mark, bidirectional controls) or a combining mark.
func invisible(r rune) bool {
	return unicode.In(r, unicode.Cf, unicode.Mn, unicode.Me)
}

// find returns the first window of the run that is a card number.
func (d digitRun) find() (match, bool) {
	for i := range d.digits {
		if lengths := d.lengthsFrom(i); lengths != 0 {
			for n := MinDigits; n <= MaxDigits && i+n <= len(d.digits); n++ {
				if lengths&(1<<n) != 0 && d.window(i, n) && luhn(d.digits[i:i+n]) {
					w := slices.Clone(d.digits[i : i+n])
					return match{digits: w, network: networkOf(w)}, true
				}
			}
		}
	}
	return match{}, false
}

// lengthsFrom is the set of lengths a network issues for a number starting at digit i.
func (d digitRun) lengthsFrom(i int) uint32 {
	return lengthsAt(d.digits[i:min(len(d.digits), i+6)])
}

// window reports whether the n digits from i are a window the policy looks at: one that starts
// at a group's first digit (and spans as many groups as it takes).
func (d digitRun) window(i, n int) bool {
	return i == 0 || d.groupEnd[i-1] == i
}

// luhn reports whether the digits pass the Luhn checksum (ISO/IEC 7812-1 annex B).
func luhn(d []byte) bool {
	sum := 0
	double := false
	for i := len(d) - 1; i >= 0; i-- {
		x := int(d[i])
		if double {
			x *= 2
			if x > 9 {
				x -= 9
			}
		}
		sum += x
		double = !double
	}
	return sum%10 == 0
}

// digitRanges are the ranges of Unicode's decimal digits (category Nd). Unicode encodes each
// script's digits 0 to 9 contiguously and in order (a stability policy), so a digit's value
// is its distance from its range's start, modulo 10 (a range may hold several scripts' digits
// back to back, like the mathematical digits).
var digitRanges = func() []unicode.Range32 {
	var out []unicode.Range32
	for _, r := range unicode.Nd.R16 {
		out = append(out, unicode.Range32{Lo: uint32(r.Lo), Hi: uint32(r.Hi), Stride: uint32(r.Stride)})
	}
	out = append(out, unicode.Nd.R32...)
	return out
}()

// digitValue is r's value when r is a decimal digit of any script.
func digitValue(r rune) (byte, bool) {
	if r >= '0' && r <= '9' {
		return byte(r - '0'), true
	}
	if r < utf8.RuneSelf {
		return 0, false
	}
	i, found := slices.BinarySearchFunc(digitRanges, uint32(r), func(rg unicode.Range32, x uint32) int {
		switch {
		case rg.Hi < x:
			return -1
		case rg.Lo > x:
			return 1
		}
		return 0
	})
	if !found {
		return 0, false
	}
	return byte((uint32(r) - digitRanges[i].Lo) % 10), true
}
