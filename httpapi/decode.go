package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/payrouter/payrouter/cardnum"
)

// jsonValue is a decoded JSON value: *jsonObject, []jsonValue, string, json.Number, bool or nil.
type jsonValue = any

// jsonObject keeps the members of an object exactly as sent: decoding refuses duplicate keys,
// and lookups are case-sensitive (encoding/json's struct decoding would accept "Amount").
type jsonObject struct {
	keys   []string
	values map[string]jsonValue
}

// errDecode is a body that is not one well-formed JSON value.
var errDecode = errors.New("the body is not valid JSON")

// parseJSON reads exactly one JSON value from body, refusing duplicate keys and trailing data.
// Its errors never quote the body.
func parseJSON(body []byte) (jsonValue, error) {
	// encoding/json replaces bytes that are not UTF-8, and \u escapes of a lone surrogate, by
	// U+FFFD without a word: a description would be stored other than it was sent. Refused
	// instead (RFC 8259 section 8.1: text exchanged between systems is UTF-8).
	if !utf8.Valid(body) {
		return nil, errors.New("the body is not valid UTF-8")
	}
	if loneSurrogate(body) {
		return nil, errors.New("the body escapes half of a UTF-16 surrogate pair (\\uD800-\\uDFFF alone), which is no character")
	}
	if json.Valid(body) {
		// One well-formed value and nothing after it, checked without allocating: walked
		// directly. Only its depth and duplicate keys are left to refuse.
		w := validWalker{body: body, text: string(body)}
		return w.value(0)
	}
	// Not one well-formed value: the token-by-token walk finds what is wrong, and says it in
	// the same words as for a body it would have walked whole (a key given twice before the
	// syntax error is still named).
	return parseTokens(body)
}

// parseTokens is parseJSON by encoding/json's tokens: any body, valid or not. Its errors are
// parseJSON's.
func parseTokens(body []byte) (jsonValue, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("the body has data after its JSON object")
	}
	return v, nil
}

// validWalker reads a body that json.Valid accepted into the jsonValues parseValue makes, with
// the same refusals (depth, duplicate keys) in the same order. Decoding by tokens costs a
// dozen allocations per scalar (encoding/json's Decoder finds the end of each one by making a
// syntax error); a charge's body has a dozen scalars, and this walk makes none but the values.
//
// Keys and numbers are cut from text, one copy of the body, rather than copied one by one: they
// are read while the request is served and never kept (but metadata keys, which decodeCharge
// copies out). String values are copies of their own, since a charge keeps them: a cut would
// keep the whole body alive with it.
type validWalker struct {
	body []byte
	text string // body as a string
	pos  int
}

func (w *validWalker) skipSpace() {
	for w.pos < len(w.body) {
		switch w.body[w.pos] {
		case ' ', '\t', '\n', '\r':
			w.pos++
		default:
			return
		}
	}
}

// value reads the value at w.pos; depth as parseValue counts it.
func (w *validWalker) value(depth int) (jsonValue, error) {
	if depth > maxDepth {
		return nil, errors.New("the body nests too deeply")
	}
	w.skipSpace()
	switch c := w.body[w.pos]; c {
	case '{':
		w.pos++
		// Room for a charge's members at once: its keys are not copied again and again.
		obj := &jsonObject{values: make(map[string]jsonValue, 8)}
		w.skipSpace()
		if w.body[w.pos] == '}' {
			w.pos++
			return obj, nil
		}
		obj.keys = make([]string, 0, 8)
		for {
			w.skipSpace()
			key, err := w.str(true)
			if err != nil {
				return nil, err
			}
			if _, dup := obj.values[key]; dup {
				return nil, &duplicateKeyError{key: key}
			}
			w.skipSpace()
			w.pos++ // ':'
			v, err := w.value(depth + 1)
			if err != nil {
				return nil, err
			}
			obj.keys = append(obj.keys, key)
			obj.values[key] = v
			w.skipSpace()
			end := w.body[w.pos] == '}'
			w.pos++ // ',' or '}'
			if end {
				return obj, nil
			}
		}
	case '[':
		w.pos++
		var list []jsonValue // nil when empty, as parseValue makes it
		w.skipSpace()
		if w.body[w.pos] == ']' {
			w.pos++
			return list, nil
		}
		for {
			v, err := w.value(depth + 1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
			w.skipSpace()
			end := w.body[w.pos] == ']'
			w.pos++ // ',' or ']'
			if end {
				return list, nil
			}
		}
	case '"':
		return w.str(false)
	case 't':
		w.pos += len("true")
		return true, nil
	case 'f':
		w.pos += len("false")
		return false, nil
	case 'n':
		w.pos += len("null")
		return nil, nil
	default: // a number: its text, as UseNumber keeps it
		start := w.pos
		for w.pos < len(w.body) && strings.IndexByte("+-.0123456789eE", w.body[w.pos]) >= 0 {
			w.pos++
		}
		return json.Number(w.text[start:w.pos]), nil
	}
}

// str reads the string at w.pos. One without escapes is its bytes (valid UTF-8, checked before):
// cut from text for a key, copied for a value; one with escapes is unquoted by encoding/json, as
// the token walk would.
func (w *validWalker) str(key bool) (string, error) {
	start := w.pos
	w.pos++ // the opening quote
	escaped := false
	for {
		switch w.body[w.pos] {
		case '\\':
			escaped = true
			w.pos += 2 // the escape and the character it escapes (a \u's digits follow as plain bytes)
			continue
		case '"':
			w.pos++
			if !escaped {
				if key {
					return w.text[start+1 : w.pos-1], nil
				}
				return string(w.body[start+1 : w.pos-1]), nil
			}
			var s string
			if err := json.Unmarshal(w.body[start:w.pos], &s); err != nil {
				return "", errDecode // not reached: the body is valid
			}
			return s, nil
		}
		w.pos++
	}
}

// maxDepth bounds nesting: no valid request nests deeper than three levels.
const maxDepth = 16

func parseValue(dec *json.Decoder, depth int) (jsonValue, error) {
	if depth > maxDepth {
		return nil, errors.New("the body nests too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, errDecode
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := &jsonObject{values: map[string]jsonValue{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, errDecode
				}
				key, ok := kt.(string)
				if !ok {
					return nil, errDecode
				}
				if _, dup := obj.values[key]; dup {
					return nil, &duplicateKeyError{key: key}
				}
				v, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj.keys = append(obj.keys, key)
				obj.values[key] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, errDecode
			}
			return obj, nil
		case '[':
			var list []jsonValue
			for dec.More() {
				v, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, errDecode
			}
			return list, nil
		}
		return nil, errDecode
	default:
		return t, nil
	}
}

// duplicateKeyError is an object that names one member twice: which of the two wins differs
// between parsers, so neither is taken.
type duplicateKeyError struct{ key string }

func (e *duplicateKeyError) Error() string { return "the key is given twice" }

// chargeInput is a decoded, valid POST /charge body.
type chargeInput struct {
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod paymentMethod     `json:"payment_method"`
	Country       string            `json:"country,omitempty"`
	CustomerID    string            `json:"customer_id,omitempty"`
	Description   string            `json:"description,omitempty"`
	Capture       bool              `json:"capture"`
	Gateway       string            `json:"gateway,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

type paymentMethod struct {
	Type  string `json:"type"`
	Token string `json:"token"`
}

// Limits of a charge body (docs/api.md, POST /charge).
const (
	maxAmount        = 1_000_000_000_000
	maxDescription   = 500
	maxMetadataPairs = 20
	maxMetadataKey   = 40
	maxMetadataValue = 500
	// maxMetadataBytes bounds a charge's metadata as a whole: its keys and values together, in
	// bytes of UTF-8, so that what a charge keeps in memory and in the database is bounded
	// whatever the script (20 values of 500 four-byte characters would be 40 KB).
	maxMetadataBytes  = 4096
	maxShortString    = 255
	cardNumberRefusal = "looks like a raw card number: payrouter takes tokens only, never card numbers"
)

var (
	countryPattern = regexp.MustCompile(`^[A-Z]{2}$`)
	// tokenPattern is what a payment_method.token may be: what the gateways' tokens are made
	// of (tok_visa, pm_1N..., 8c7e..., tranglo:abc.123), and nothing that could carry text.
	// validToken checks it on every charge, without the regexp machinery; FuzzValidToken holds
	// the two to the same answers.
	tokenPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,255}$`)
)

// validToken reports whether s matches tokenPattern.
func validToken(s string) bool {
	if len(s) < 1 || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// fields walks one JSON object against a fixed set of members, collecting field errors.
type fields struct {
	prefix string
	obj    *jsonObject
	errs   *[]fieldError
}

func (f fields) fail(name, format string, args ...any) {
	switch n := len(*f.errs); {
	case n > maxFieldErrors:
		return // the answer says more were left out
	case n == maxFieldErrors:
		*f.errs = append(*f.errs, fieldError{Field: "(body)", Message: fmt.Sprintf("has more problems than the %d listed; fix these first", maxFieldErrors)})
		return
	}
	*f.errs = append(*f.errs, fieldError{Field: f.prefix + name, Message: fmt.Sprintf(format, args...)})
}

// maxFieldErrors bounds the field errors one answer lists: a body of thousands of unknown
// members gets a short answer, not one as long as itself.
const maxFieldErrors = 20

// known refuses every member not in names.
func (f fields) known(names ...string) {
	for _, k := range f.obj.keys {
		found := false
		for _, n := range names {
			if k == n {
				found = true
				break
			}
		}
		if !found {
			f.fail(safeName(k), "is not a known field")
		}
	}
}

// get returns a member, treating null as absent.
func (f fields) get(name string) (jsonValue, bool) {
	v, ok := f.obj.values[name]
	return v, ok && v != nil
}

func (f fields) str(name string, required bool, maxLen int) string {
	v, ok := f.get(name)
	if !ok {
		if required {
			f.fail(name, "is required")
		}
		return ""
	}
	s, isStr := v.(string)
	if !isStr {
		f.fail(name, "must be a string")
		return ""
	}
	if required && s == "" {
		f.fail(name, "must not be empty")
		return ""
	}
	if maxLen > 0 && utf8.RuneCountInString(s) > maxLen {
		f.fail(name, "must be at most %d characters", maxLen)
		return ""
	}
	if hasControl(s) {
		f.fail(name, controlRefusal)
		return ""
	}
	return s
}

// controlRefusal is the field error of text with a control character in it.
const controlRefusal = "must not contain control characters (NUL, line breaks, tabs, escapes)"

// hasControl reports whether s holds a control character (C0, DEL or C1): text a storefront
// sends to be stored and shown has none, a NUL is refused by PostgreSQL's text, and a line
// break in a stored field could forge a line in someone's log or export. Refused alike by
// both stores, since the API refuses it first.
func hasControl(s string) bool {
	return strings.ContainsFunc(s, unicode.IsControl)
}

func (f fields) object(name string, required bool) *jsonObject {
	v, ok := f.get(name)
	if !ok {
		if required {
			f.fail(name, "is required")
		}
		return nil
	}
	o, isObj := v.(*jsonObject)
	if !isObj {
		f.fail(name, "must be an object")
		return nil
	}
	return o
}

// decodeCharge decodes a POST /charge body strictly: one JSON object, exact member names, exact
// types, no duplicates, nothing after it, and nothing that looks like a card number anywhere.
// The field errors never repeat a value.
func decodeCharge(body []byte) (chargeInput, []fieldError, error) {
	var in chargeInput
	v, err := parseJSON(body)
	if err != nil {
		var dup *duplicateKeyError
		if errors.As(err, &dup) {
			return in, []fieldError{{Field: safeName(dup.key), Message: "is given twice"}}, err
		}
		return in, []fieldError{{Field: "(body)", Message: err.Error()}}, err
	}
	if field := findCardNumber(v, ""); field != "" {
		return in, []fieldError{{Field: field, Message: cardNumberRefusal}}, errors.New("card number")
	}
	obj, ok := v.(*jsonObject)
	if !ok {
		return in, []fieldError{{Field: "(body)", Message: "must be a JSON object"}}, errDecode
	}
	var errs []fieldError
	f := fields{obj: obj, errs: &errs}
	f.known("amount", "currency", "payment_method", "country", "customer_id", "description", "capture", "gateway", "metadata")

	if a, ok := f.get("amount"); !ok {
		f.fail("amount", "is required")
	} else if n, isNum := a.(json.Number); !isNum {
		f.fail("amount", "must be an integer number of minor units")
	} else if i, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
		f.fail("amount", "must be an integer number of minor units, from 1 to 10^12")
	} else if i < 1 || i > maxAmount {
		f.fail("amount", "must be from 1 to 10^12 minor units")
	} else {
		in.Amount = i
	}

	in.Currency = f.str("currency", true, 0)
	if in.Currency != "" && !currencies[in.Currency] {
		f.fail("currency", "must be the ISO 4217 code of a currency in use, in upper case, such as USD")
	}

	if pm := f.object("payment_method", true); pm != nil {
		p := fields{prefix: "payment_method.", obj: pm, errs: &errs}
		if _, has := pm.values["number"]; has {
			p.fail("number", cardNumberRefusal)
		}
		p.known("type", "token", "number")
		in.PaymentMethod.Type = p.str("type", true, 0)
		if in.PaymentMethod.Type != "" && in.PaymentMethod.Type != "card" {
			p.fail("type", `must be "card"`)
		}
		in.PaymentMethod.Token = p.str("token", true, maxShortString)
		if in.PaymentMethod.Token != "" && !validToken(in.PaymentMethod.Token) {
			p.fail("token", "must be 1 to 255 of A-Z a-z 0-9 _ . : -")
		}
	}

	in.Country = f.str("country", false, 0)
	if in.Country != "" && !countryPattern.MatchString(in.Country) {
		f.fail("country", "must be an ISO 3166 alpha-2 code in upper case, such as MY")
	}
	in.CustomerID = f.str("customer_id", false, maxShortString)
	in.Description = f.str("description", false, maxDescription)
	in.Gateway = f.str("gateway", false, maxShortString)

	in.Capture = true
	if c, ok := f.get("capture"); ok {
		if b, isBool := c.(bool); isBool {
			in.Capture = b
		} else {
			f.fail("capture", "must be a JSON boolean")
		}
	}

	if md := f.object("metadata", false); md != nil {
		if len(md.keys) > maxMetadataPairs {
			f.fail("metadata", "must have at most %d pairs", maxMetadataPairs)
		} else {
			in.Metadata = make(map[string]string, len(md.keys))
			size := 0
			for _, k := range md.keys {
				if s, isStr := md.values[k].(string); isStr {
					size += len(k) + len(s)
				}
				s, isStr := md.values[k].(string)
				switch {
				case utf8.RuneCountInString(k) > maxMetadataKey || k == "":
					f.fail("metadata", "keys must be 1 to %d characters", maxMetadataKey)
				case hasControl(k):
					f.fail("metadata", "keys "+controlRefusal)
				case !isStr:
					f.fail("metadata."+safeName(k), "must be a string")
				case utf8.RuneCountInString(s) > maxMetadataValue:
					f.fail("metadata."+safeName(k), "must be at most %d characters", maxMetadataValue)
				case hasControl(s):
					f.fail("metadata."+safeName(k), controlRefusal)
				default:
					in.Metadata[strings.Clone(k)] = s // a key is cut from the body (validWalker): kept, it is copied
				}
			}
			if size > maxMetadataBytes {
				f.fail("metadata", "must be at most %d bytes in all, keys and values in UTF-8", maxMetadataBytes)
			}
		}
	}
	if len(errs) > 0 {
		return in, errs, errors.New("invalid charge")
	}
	return in, nil, nil
}

// safeName is a member name fit to appear in an error: printable, short, and not itself data
// that must not be echoed.
func safeName(k string) string {
	if len(k) > 64 || !utf8.ValidString(k) || cardnum.Contains(k) || strings.ContainsFunc(k, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "(a field name)"
	}
	return k
}

// findCardNumber returns the path of the first member whose key or value holds something that
// looks like a card number, or "".
func findCardNumber(v jsonValue, path string) string {
	switch t := v.(type) {
	case string:
		if cardnum.Contains(t) {
			return path
		}
	case json.Number:
		if cardnum.Contains(t.String()) {
			return path
		}
	case []jsonValue:
		for _, e := range t {
			if p := findCardNumber(e, path); p != "" {
				return p
			}
		}
	case *jsonObject:
		for _, k := range t.keys {
			child := k
			if path != "" {
				child = path + "." + k
			}
			if cardnum.Contains(k) {
				if path == "" {
					return "(body)"
				}
				return path
			}
			if p := findCardNumber(t.values[k], safeName(child)); p != "" {
				if strings.Contains(p, "(a field name)") {
					return "(body)"
				}
				return p
			}
		}
	}
	return ""
}

// loneSurrogate reports whether a string of body, read as JSON, has a \u escape of a UTF-16
// surrogate that is not one half of a pair: a high one (D800-DBFF) not followed at once by an
// escaped low one (DC00-DFFF), or a low one not preceded by a high one. Text outside strings,
// and escapes other than \u, are passed over; a body that is not JSON is the decoder's to refuse.
func loneSurrogate(body []byte) bool {
	inString := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '"':
			inString = !inString
		case c != '\\' || !inString:
		case i+1 < len(body) && body[i+1] != 'u':
			i++ // an escape of one character: \" \\ \/ \b \f \n \r \t
		default:
			r, ok := escapedUnit(body, i)
			switch {
			case !ok:
				return false // malformed: the decoder says so
			case r >= 0xDC00 && r <= 0xDFFF:
				return true // a low half with no high half before it
			case r >= 0xD800 && r <= 0xDBFF:
				low, ok := escapedUnit(body, i+6)
				if !ok || low < 0xDC00 || low > 0xDFFF {
					return true
				}
				i += 11 // both escapes
			default:
				i += 5
			}
		}
	}
	return false
}

// escapedUnit reads the \uXXXX escape at body[i:], the UTF-16 code unit it names.
func escapedUnit(body []byte, i int) (rune, bool) {
	if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
	return rune(v), err == nil
}
