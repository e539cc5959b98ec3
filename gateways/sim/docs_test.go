package sim

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/payrouter/payrouter/internal/refdoc"
)

// The simulator reference, docs/simulator.md, is kept true by this test: its modes and behavior
// fields are exactly the simulator's, and every endpoint it documents answers.

const simulatorDoc = "../../docs/simulator.md"

// simEndpoint is a section heading naming an endpoint: ### `PUT /_sim/behavior`.
var simEndpoint = regexp.MustCompile("(?m)^### `(GET|PUT|POST) (/[^`]*)`$")

// tableNames returns the first cells, unquoted, of the rows of the table whose header's first
// cell is header.
func tableNames(text, header string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		switch {
		case !strings.HasPrefix(line, "|"):
			in = false
		case strings.TrimSpace(cells[0]) == header:
			in = true
		case in && strings.HasPrefix(line, "| `"):
			out = append(out, strings.Trim(strings.TrimSpace(cells[0]), "`"))
		}
	}
	return out
}

func TestSimulatorDoc(t *testing.T) {
	sections, err := refdoc.Sections(simulatorDoc)
	if err != nil {
		t.Fatal(err)
	}
	control := sections["Control API"]

	var modes []string
	for _, m := range Modes {
		modes = append(modes, string(m))
	}
	if got := tableNames(control, "mode"); !slices.Equal(got, modes) {
		t.Errorf("%s: the modes' table lists %q; the simulator's modes are %q", simulatorDoc, got, modes)
	}

	var fields []string
	bt := reflect.TypeFor[behaviorJSON]()
	for i := range bt.NumField() {
		fields = append(fields, strings.Split(bt.Field(i).Tag.Get("json"), ",")[0])
	}
	if got := tableNames(control, "field"); !slices.Equal(got, fields) {
		t.Errorf("%s: the behavior's table lists %q; PUT /_sim/behavior takes %q", simulatorDoc, got, fields)
	}

	s := New(Config{Name: "doc"})
	endpoints := simEndpoint.FindAllStringSubmatch(control, -1)
	if len(endpoints) < 5 {
		t.Fatalf("%s: only %d endpoints documented", simulatorDoc, len(endpoints))
	}
	for _, e := range endpoints {
		var body *strings.Reader
		switch {
		case e[1] == http.MethodPut && e[2] == "/_sim/callback":
			body = strings.NewReader(`{"url": ""}`)
		case e[1] == http.MethodPut:
			body = strings.NewReader(`{"mode": "normal"}`)
		default:
			body = strings.NewReader("")
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(e[1], e[2], body))
		if rec.Code != http.StatusOK {
			t.Errorf("%s: documents %s %s, which answers %d", simulatorDoc, e[1], e[2], rec.Code)
		}
	}
}
