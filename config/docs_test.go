package config

import (
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The configuration reference, docs/configuration.md, is kept true by these tests: every key the
// schema accepts is documented and every documented key exists, each documented default is what
// a file leaving the key out gets, and each key's Reload column says what Diff does with it.

const configurationDoc = "../docs/configuration.md"

// docKey is one row of a table of docs/configuration.md.
type docKey struct {
	path, def, reload string
}

// readConfigDoc returns the rows whose first cell is a key in backticks, by key.
func readConfigDoc(t *testing.T) map[string]docKey {
	t.Helper()
	data, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]docKey{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Errorf("%s: a key's row needs 4 cells (key, default, reload, meaning): %q", configurationDoc, line)
			continue
		}
		k := docKey{
			path:   strings.Trim(strings.TrimSpace(cells[0]), "`"),
			def:    strings.TrimSpace(cells[1]),
			reload: strings.TrimSpace(cells[2]),
		}
		if _, dup := rows[k.path]; dup {
			t.Errorf("%s: %s is documented twice", configurationDoc, k.path)
		}
		rows[k.path] = k
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no key rows found", configurationDoc)
	}
	return rows
}

// mapPlaceholders names the keys of the schema's mappings of sections, as the reference writes
// them. A new mapping of sections needs its placeholder here (and in the reference).
var mapPlaceholders = map[string]string{
	"gateways":                   "<name>",
	"gateways.<name>.operations": "<operation>",
}

// schemaKeys walks the schema from typ and returns every key path the file accepts,
// true for the leaves (a value), false for the sections holding other keys. A mapping of
// sections takes its placeholder (gateways.<name>.timeout), a list of sections "[]"
// (routes[].name); mappings and lists of values are leaves (credentials, routes[].gateways).
// The keys of a section are the decoder's own (fieldsOf), so the walk sees exactly what a file
// may say.
func schemaKeys(t *testing.T, typ reflect.Type, prefix string, out map[string]bool) {
	t.Helper()
	fields, _ := fieldsOf(typ)
	for key, i := range fields {
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		schemaValue(t, typ.FieldByIndex(i).Type, path, out)
	}
}

func schemaValue(t *testing.T, typ reflect.Type, path string, out map[string]bool) {
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch {
	case typ == reflect.TypeFor[time.Duration](), typ == weightsType, reflect.PointerTo(typ).Implements(textType):
		// Values the decoder reads whole: a duration, a split's mapping of weights, a type that
		// reads itself from text (hedge.after).
		out[path] = true
	case typ.Kind() == reflect.Struct:
		out[path] = false
		schemaKeys(t, typ, path, out)
	case typ.Kind() == reflect.Map && typ.Elem().Kind() == reflect.Struct:
		ph, ok := mapPlaceholders[path]
		if !ok {
			t.Errorf("%s is a mapping of sections: give its keys a placeholder in mapPlaceholders", path)
			return
		}
		out[path] = false
		schemaValue(t, typ.Elem(), path+"."+ph, out)
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Struct:
		out[path] = false
		schemaValue(t, typ.Elem(), path+"[]", out)
		if typ.Elem() == apiKeyType {
			out[path] = true // an entry may be the key alone, a plain string
		}
	default:
		out[path] = true
	}
}

// TestConfigurationDocKeys: every key the schema accepts is in docs/configuration.md, and every
// key documented there is one the schema accepts.
func TestConfigurationDocKeys(t *testing.T) {
	schema := map[string]bool{}
	schemaKeys(t, reflect.TypeFor[Config](), "", schema)
	doc := readConfigDoc(t)
	for _, path := range slices.Sorted(maps.Keys(schema)) {
		if _, ok := doc[path]; !ok && schema[path] {
			t.Errorf("%s: the key %s is not documented (add a row: key, default, reload, meaning)", configurationDoc, path)
		}
	}
	for _, path := range slices.Sorted(maps.Keys(doc)) {
		if _, ok := schema[path]; !ok {
			t.Errorf("%s: documents %s, which the configuration does not accept", configurationDoc, path)
		}
		if r := doc[path].reload; r != "reload" && r != "restart" {
			t.Errorf("%s: %s: the Reload column must say reload or restart, not %q", configurationDoc, path, r)
		}
		if doc[path].def == "" {
			t.Errorf("%s: %s: the Default column is empty", configurationDoc, path)
		}
	}
}

// minimalConfig is the smallest file that names every section with defaults: one key, one
// gateway (g), one hedged route.
const minimalConfig = `
auth: {api_keys: [key_0123456789abcdef012345]}
gateways: {g: {kind: paywell, base_url: "http://127.0.0.1:9101", credentials: {api_key: x}}}
routes: [{name: r, gateways: [g], hedge: {after: 1s}}]
`

// TestConfigurationDocDefaults: a documented default written as a value (its cell starts with
// `value`) is what a file that leaves the key out gets. Keys the minimal file cannot reach (a
// tls section, an operations override) are not checked.
func TestConfigurationDocDefaults(t *testing.T) {
	c, err := Parse([]byte(minimalConfig), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, k := range readConfigDoc(t) {
		if !strings.HasPrefix(k.def, "`") {
			continue // said in words: "required", "none: plain HTTP", ...
		}
		want, _, _ := strings.Cut(strings.TrimPrefix(k.def, "`"), "`")
		v, ok := lookup(reflect.ValueOf(c).Elem(), k.path)
		if !ok {
			continue
		}
		checked++
		if d, err := time.ParseDuration(want); err == nil && v.Type() == reflect.TypeFor[time.Duration]() && time.Duration(v.Int()) == d {
			continue // "75s" is "1m15s"
		}
		if got := render(v); got != want {
			t.Errorf("%s: %s: the documented default is %q; a file leaving it out gets %q", configurationDoc, k.path, want, got)
		}
	}
	if checked < 30 {
		t.Errorf("only %d defaults checked; the minimal file or lookup lost its reach", checked)
	}
}

// lookup finds a documented key path in a loaded configuration: placeholders take the
// mapping's first key, [] the list's first entry. ok is false when the configuration has
// nothing there.
func lookup(v reflect.Value, path string) (reflect.Value, bool) {
	for _, seg := range strings.Split(path, ".") {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return v, false
			}
			v = v.Elem()
		}
		if strings.HasPrefix(seg, "<") {
			keys := v.MapKeys()
			if len(keys) == 0 {
				return v, false
			}
			slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
			v = v.MapIndex(keys[0])
			continue
		}
		name, list := strings.CutSuffix(seg, "[]")
		f, ok := fieldByTag(v.Type(), name)
		if !ok {
			return v, false
		}
		v = v.FieldByIndex(f.Index)
		if list {
			if v.Len() == 0 {
				return v, false
			}
			v = v.Index(0)
		}
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return v, false
		}
		v = v.Elem()
	}
	return v, true
}

func fieldByTag(typ reflect.Type, key string) (reflect.StructField, bool) {
	fields, _ := fieldsOf(typ)
	index, ok := fields[key]
	if !ok {
		return reflect.StructField{}, false
	}
	f := typ.FieldByIndex(index)
	f.Index = index // the path from typ, through inline fields
	return f, true
}

// render writes a value as the reference does: durations as a person would ("9480h", "75s").
func render(v reflect.Value) string {
	if v.Type() == reflect.TypeFor[time.Duration]() {
		return fmtDuration(time.Duration(v.Int()))
	}
	if v.Type() == reflect.TypeFor[Bytes]() {
		return Bytes(v.Int()).String() // "512MiB"
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	}
	return "(" + v.Type().String() + ")"
}

// TestConfigurationDocReload: each top-level key's Reload column says what a reload does with a
// change to it, as Diff decides: restart when Diff lists it under restart_needed, reload when
// Diff reports it applied. The keys under a section say the same as the section, except under
// an optional section (tls, admin_tls): turning it on or off waits for a restart, the keys in it
// change with a reload. A key whose change Diff does not see at all fails: a reload would drop
// it silently.
func TestConfigurationDocReload(t *testing.T) {
	base, err := Parse([]byte(minimalConfig), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	doc := readConfigDoc(t)
	typ := reflect.TypeFor[Config]()
	fields, _ := fieldsOf(typ)
	for key, i := range fields {
		f := typ.FieldByIndex(i)
		next := *base
		perturb(reflect.ValueOf(&next).Elem().FieldByIndex(i))
		ch := Diff(base, &next)
		if ch.None() {
			t.Errorf("Diff sees no change when %s changes: a reload would neither apply it nor say it needs a restart", key)
			continue
		}
		want := "reload"
		if slices.Contains(ch.RestartNeeded, key) {
			want = "restart"
		}
		for path, k := range doc {
			under := strings.HasPrefix(path, key+".") || strings.HasPrefix(path, key+"[]")
			switch {
			case path == key, under && f.Type.Kind() != reflect.Pointer:
				if k.reload != want {
					t.Errorf("%s: %s: Reload says %s; a change to %s takes a %s", configurationDoc, path, k.reload, key, want)
				}
			case under && k.reload != "reload":
				t.Errorf("%s: %s: Reload says %s; while %s stays on, a reload applies the keys in it", configurationDoc, path, k.reload, key)
			}
		}
	}
}

// perturb replaces v with a value that differs from it, without changing what v shared with
// the value it was copied from (maps and slices are copied, never written through).
func perturb(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		} else {
			v.SetZero()
		}
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Float64:
		v.SetFloat(v.Float()/2 + 0.25)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Struct:
		perturb(v.Field(0))
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 0, v.Len()+1)
		s = reflect.AppendSlice(s, v)
		v.Set(reflect.Append(s, reflect.Zero(v.Type().Elem())))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for _, k := range v.MapKeys() {
			m.SetMapIndex(k, v.MapIndex(k))
		}
		// An entry changed, not one added: a configuration lists its gateways in GatewayNames
		// too, and an entry missing there is no gateway of the file.
		keys := v.MapKeys()
		if len(keys) == 0 {
			m.SetMapIndex(reflect.ValueOf("added_by_perturb").Convert(v.Type().Key()), reflect.Zero(v.Type().Elem()))
		} else {
			slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(keys[0]))
			perturb(e)
			m.SetMapIndex(keys[0], e)
		}
		v.Set(m)
	default:
		panic("perturb: " + v.Type().String())
	}
}
