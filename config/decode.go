package config

import (
	"encoding"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/payrouter/payrouter/routing"
)

// decoder fills a Config from a parsed YAML tree, strictly. It replaces yaml.v3's own decoding
// (even with Decoder.KnownFields) for three reasons: every error can name the field path and
// line and they are all reported, not the first; it records which keys the file gives, so an
// explicit 0 ("off") is told apart from an absent key (take the default); and it records the key
// order of maps (gateways, split), which Go maps lose.
type decoder struct {
	problems []string
	present  map[string]bool     // paths the file gives a non-null, well-formed value
	bad      map[string]bool     // paths whose value could not be decoded: validation stays quiet there
	order    map[string][]string // the keys of each decoded map, in file order
	budget   int                 // nodes left to visit; stops alias bombs
	merging  map[*yaml.Node]bool // mappings being expanded by "<<", to refuse a mapping merging itself
	// env holds the scalars whose value came from ${...} (expandTree); fromEnv the same by path,
	// for validation. Such values are never quoted in a message.
	env     map[*yaml.Node]*expansion
	fromEnv map[string]*expansion
	// literal lists the paths of secrets written in the file itself (not from ${...}).
	literal []string
}

// decodeBudget bounds the work one document may cause. A real configuration visits a few
// thousand nodes; aliases can make a small file visit millions.
const decodeBudget = 200_000

var (
	durationType = reflect.TypeFor[time.Duration]()
	apiKeyType   = reflect.TypeFor[APIKey]()
	weightsType  = reflect.TypeFor[[]routing.Weight]()
	textType     = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func newDecoder() *decoder {
	return &decoder{
		present: map[string]bool{},
		bad:     map[string]bool{},
		order:   map[string][]string{},
		budget:  decodeBudget,
		merging: map[*yaml.Node]bool{},
		fromEnv: map[string]*expansion{},
	}
}

// report records a problem at node n. An empty path is the top level.
func (d *decoder) report(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	d.problems = append(d.problems, fmt.Sprintf("line %d: %s", n.Line, msg))
}

// fail records a problem with the value at path and marks the path bad.
func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.bad[path] = true
	d.report(n, path, format, args...)
}

// spend takes one unit of the budget and reports whether work may go on.
func (d *decoder) spend(n *yaml.Node) bool {
	if d.budget <= 0 {
		return false
	}
	d.budget--
	if d.budget == 0 {
		// What was decoded is a truncated configuration: validating it would only add noise.
		d.bad[""] = true
		d.report(n, "", "the document is too large or repeats aliases too often")
		return false
	}
	return true
}

// decode sets v from n and reports whether n held a value (false for null, or an error).
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) bool {
	if !d.spend(n) {
		return false
	}
	n = follow(n)
	if e := d.env[n]; e != nil {
		d.fromEnv[path] = e
	} else if n != nil && n.Kind == yaml.ScalarNode && n.Value != "" && (secretPath(path) || urlWithPassword(path, n.Value)) {
		d.literal = append(d.literal, path)
	}
	if n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null") {
		return false
	}
	switch {
	case v.Type() == durationType:
		return d.duration(n, v, path)
	case v.Type() == apiKeyType && n.Kind == yaml.ScalarNode:
		// A plain string is the key alone: every right, the scope from its digest.
		v.FieldByName("Key").SetString(n.Value)
		return true
	case v.Type() == weightsType:
		return d.weights(n, v, path)
	case reflect.PointerTo(v.Type()).Implements(textType):
		return d.text(n, v, path)
	}
	switch v.Kind() {
	case reflect.Struct:
		return d.structure(n, v, path)
	case reflect.Map:
		return d.mapping(n, v, path)
	case reflect.Slice:
		return d.sequence(n, v, path)
	case reflect.Pointer:
		e := reflect.New(v.Type().Elem())
		if !d.decode(n, e.Elem(), path) {
			return false
		}
		v.Set(e)
		return true
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "want a string, got %s", d.show(n, path))
			return false
		}
		// The raw text, not YAML's reading of it: a credential "0123" must not become 123.
		v.SetString(n.Value)
		return true
	case reflect.Int, reflect.Int64:
		return d.integer(n, v, path)
	case reflect.Float64:
		return d.float(n, v, path)
	case reflect.Bool:
		return d.boolean(n, v, path)
	}
	// Only a schema change can get here; say so rather than drop the value silently.
	d.fail(n, path, "cannot decode into %s", v.Type())
	return false
}

// follow resolves an alias to the node it names.
func follow(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 8 {
			return nil
		}
		n = n.Alias
	}
	return n
}

// text decodes a scalar into a type that reads itself (encoding.TextUnmarshaler), such as
// routing.HedgeAfter; its error says what the value must be, and the line adds what it was.
func (d *decoder) text(n *yaml.Node, v reflect.Value, path string) bool {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want a string, got %s", d.show(n, path))
		return false
	}
	if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(strings.TrimSpace(n.Value))); err != nil {
		d.fail(n, path, "%v, got %s", err, d.show(n, path))
		return false
	}
	return true
}

// weights decodes a mapping of gateway names to weights (a route's split) into routing.Weight
// values in the file's order, which a Go map would lose.
func (d *decoder) weights(n *yaml.Node, v reflect.Value, path string) bool {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping of names, got %s", d.show(n, path))
		return false
	}
	var out []routing.Weight
	for _, p := range d.pairs(n, path, 0) {
		w := routing.Weight{Gateway: p.key.Value}
		child := join(path, p.key.Value)
		if d.decode(p.value, reflect.ValueOf(&w.Weight).Elem(), child) {
			d.present[child] = true
		}
		// Kept even when bad, so validation can name what the entry lacks.
		out = append(out, w)
	}
	v.Set(reflect.ValueOf(out))
	return true
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) bool {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want a duration like \"500ms\" or \"24h\", got %s", d.show(n, path))
		return false
	}
	dur, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		d.fail(n, path, "%s is not a duration (a number with a unit: \"500ms\", \"3s\", \"24h\")", d.show(n, path))
		return false
	}
	v.SetInt(int64(dur))
	return true
}

// integer accepts YAML integers and, so that "${SLOTS:-20}" may be quoted, strings holding one.
// Floats are refused rather than truncated: 2.5 slots is a mistake, not 2.
func (d *decoder) integer(n *yaml.Node, v reflect.Value, path string) bool {
	var (
		i   int64
		err error
	)
	switch {
	case n.Kind != yaml.ScalarNode:
		err = fmt.Errorf("not a scalar")
	case n.ShortTag() == "!!int":
		err = n.Decode(&i)
	case n.ShortTag() == "!!str":
		i, err = strconv.ParseInt(strings.TrimSpace(n.Value), 10, 64)
	default:
		err = fmt.Errorf("not an integer")
	}
	if err != nil || v.OverflowInt(i) {
		d.fail(n, path, "want a whole number, got %s", d.show(n, path))
		return false
	}
	v.SetInt(i)
	return true
}

func (d *decoder) float(n *yaml.Node, v reflect.Value, path string) bool {
	var (
		f   float64
		err error
	)
	switch {
	case n.Kind != yaml.ScalarNode:
		err = fmt.Errorf("not a scalar")
	case n.ShortTag() == "!!float", n.ShortTag() == "!!int":
		err = n.Decode(&f)
	case n.ShortTag() == "!!str":
		f, err = strconv.ParseFloat(strings.TrimSpace(n.Value), 64)
	default:
		err = fmt.Errorf("not a number")
	}
	if err != nil {
		d.fail(n, path, "want a number, got %s", d.show(n, path))
		return false
	}
	v.SetFloat(f)
	return true
}

func (d *decoder) boolean(n *yaml.Node, v reflect.Value, path string) bool {
	var (
		b   bool
		err error
	)
	switch {
	case n.Kind != yaml.ScalarNode:
		err = fmt.Errorf("not a scalar")
	case n.ShortTag() == "!!bool":
		err = n.Decode(&b)
	case n.ShortTag() == "!!str":
		b, err = strconv.ParseBool(strings.TrimSpace(n.Value))
	default:
		err = fmt.Errorf("not a boolean")
	}
	if err != nil {
		d.fail(n, path, "want true or false, got %s", d.show(n, path))
		return false
	}
	v.SetBool(b)
	return true
}

// removedKeys are the settings payrouter once read and reads no more, each with what took its
// place: a file still giving one is refused saying so, rather than with "unknown key" or, worse,
// run without the bound its operator meant.
var removedKeys = map[string]string{
	"state.max_charges": "memory is bounded in bytes now, each API key with its share that no other key can take; " +
		"use state.max_memory (default 512MiB, split equally among the API keys; docs/limits.md) and remove state.max_charges",
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) bool {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping of keys, got %s", d.show(n, path))
		return false
	}
	fields, names := fieldsOf(v.Type())
	for _, p := range d.pairs(n, path, 0) {
		key := p.key.Value
		index, ok := fields[key]
		if why, gone := removedKeys[join(path, key)]; !ok && gone {
			d.report(p.key, path, "%q is no longer a setting: %s", key, why)
			continue
		}
		if !ok {
			// Not marked bad: a misspelt key says nothing about the keys beside it.
			d.report(p.key, path, "unknown key %q%s", key, suggest(key, names))
			continue
		}
		child := join(path, key)
		if d.decode(p.value, v.FieldByIndex(index), child) {
			d.present[child] = true
		}
	}
	return true
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) bool {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping of names, got %s", d.show(n, path))
		return false
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	var order []string
	for _, p := range d.pairs(n, path, 0) {
		key := p.key.Value
		child := join(path, key)
		elem := reflect.New(v.Type().Elem()).Elem()
		if d.decode(p.value, elem, child) {
			d.present[child] = true
		}
		// Kept even when empty or bad, so validation can name what the entry lacks.
		v.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), elem)
		order = append(order, key)
	}
	d.order[path] = order
	return true
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) bool {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "want a list, got %s", d.show(n, path))
		return false
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		// No presence for items: defaults apply to keys, never to one element of a list.
		d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
	}
	v.Set(s)
	return true
}

// pair is one key and its value in a mapping.
type pair struct{ key, value *yaml.Node }

// pairs lists the entries of mapping n with YAML merge keys ("<<: *defaults") applied: keys
// written in the mapping win over merged ones, and among merged mappings the earlier wins, as the
// merge key specification says. Merges let a file share one breaker block between gateways.
// A key written twice is an error: yaml.v3 would keep one silently, and a duplicated timeout
// whose second value wins by accident is the kind of mistake validation exists for.
func (d *decoder) pairs(n *yaml.Node, path string, depth int) []pair {
	var explicit, merged []pair
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !d.spend(n) {
			return nil
		}
		k, val := follow(n.Content[i]), n.Content[i+1]
		if k == nil {
			continue
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, d.mergeSources(val, path, depth)...)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "a key must be a plain name, got %s", d.show(k, path))
			continue
		}
		if line, dup := first[k.Value]; dup {
			d.fail(k, join(path, k.Value), "given twice (first at line %d)", line)
			continue
		}
		first[k.Value] = k.Line
		explicit = append(explicit, pair{k, val})
	}
	if len(merged) == 0 {
		return explicit
	}
	out := make([]pair, 0, len(merged)+len(explicit))
	for _, p := range merged {
		if _, taken := first[p.key.Value]; taken {
			continue
		}
		first[p.key.Value] = p.key.Line
		out = append(out, p)
	}
	return append(out, explicit...)
}

// mergeSources returns the entries a "<<" value brings: one mapping or a list of mappings.
func (d *decoder) mergeSources(val *yaml.Node, path string, depth int) []pair {
	src := follow(val)
	if src == nil {
		return nil
	}
	var sources []*yaml.Node
	switch src.Kind {
	case yaml.MappingNode:
		sources = []*yaml.Node{src}
	case yaml.SequenceNode:
		for _, item := range src.Content {
			sources = append(sources, follow(item))
		}
	default:
		d.fail(val, path, "<< must merge a mapping or a list of mappings")
		return nil
	}
	var out []pair
	for _, m := range sources {
		switch {
		case m == nil || m.Kind != yaml.MappingNode:
			d.fail(val, path, "<< must merge a mapping or a list of mappings")
			return nil
		case d.merging[m] || depth > 16:
			d.fail(val, path, "<< merges a mapping into itself")
			return nil
		}
		d.merging[m] = true
		out = append(out, d.pairs(m, path, depth+1)...)
		delete(d.merging, m)
	}
	return out
}

// show describes a node for an error message. Values under auth and credentials are never
// shown: a secret in the wrong place is still a secret.
func (d *decoder) show(n *yaml.Node, path string) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if secretPath(path) {
		return "a value (not shown: it may be a secret)"
	}
	if e := d.env[n]; e != nil {
		return "the value of " + e.from() + " (not shown)"
	}
	return strconv.Quote(clip([]byte(n.Value)))
}

// urlWithPassword reports whether the value at path is a state store's URL with a password in it.
func urlWithPassword(path, value string) bool {
	if path != "state.database_url" && path != "state.redis_url" {
		return false
	}
	u, err := url.Parse(value)
	if err != nil || u.User == nil {
		return strings.Contains(value, "password=")
	}
	_, has := u.User.Password()
	return has
}

// secretPath reports whether values at path may be secrets.
func secretPath(path string) bool {
	return path == "auth" || strings.HasPrefix(path, "auth.") || strings.Contains(path, ".credentials") ||
		strings.HasPrefix(path, "webhooks.") && strings.Contains(path, ".secrets") ||
		strings.HasPrefix(path, "gateways.") && strings.Contains(path, ".webhook.secrets")
}

// join appends key to a dotted path. A key that is not a plain name is quoted, so every path
// stays on one line and reads unambiguously: gateways."pay well".kind.
func join(path, key string) string {
	key = display(key)
	if path == "" {
		return key
	}
	return path + "." + key
}

// display returns a name as it may appear in a message: as it is when it is a plain name
// (letters, digits, '-', '_'), else quoted.
func display(name string) string {
	if validName(name) {
		return name
	}
	return strconv.Quote(name)
}

// validName reports whether name is non-empty and only letters, digits, '-' and '_'.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if !(c == '-' || c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// fieldsOf maps the YAML names of a struct's fields to their index, and lists the names. The
// fields of an embedded struct tagged `yaml:",inline"` are the struct's own keys: a policy's
// settings type (resilience.BreakerSettings embeds payrouter.BreakerRules) shares its section.
func fieldsOf(t reflect.Type) (map[string][]int, []string) {
	fields := map[string][]int{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && opts == "inline" && f.Type.Kind() == reflect.Struct {
			inner, innerNames := fieldsOf(f.Type)
			for _, n := range innerNames {
				fields[n] = append([]int{i}, inner[n]...)
			}
			names = append(names, innerNames...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = []int{i}
		names = append(names, name)
	}
	return fields, names
}

// suggest returns ` (did you mean "x"?)` when key is a likely misspelling of a known name.
func suggest(key string, names []string) string {
	best, bestDist := "", 3
	for _, name := range names {
		if dist := editDistance(key, name); dist < bestDist {
			best, bestDist = name, dist
		}
	}
	// A two-letter key is two edits from everything; only suggest when most of it survives.
	if best == "" || bestDist*3 > len(key) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64 // long keys are never misspellings worth suggesting for
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = slices.Min([]int{prev[j] + 1, cur[j-1] + 1, prev[j-1] + cost})
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
