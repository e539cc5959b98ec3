package fallback_test

import (
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
)

// The package comment's table is the reference a reader goes to: every operation is in it, with
// exactly the policies the code allows, its default marked "(default)" (or "(only)").
func TestPackageDocTable(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "fallback.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		policies []fallback.Policy
		def      fallback.Policy
	}
	rows := map[payrouter.Operation]*row{}
	var op payrouter.Operation
	var last fallback.Policy
	inTable := false
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		if strings.HasPrefix(line, "\toperation") {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(line, "\t---") {
			continue
		}
		if !strings.HasPrefix(line, "\t") {
			break // the table ends with its indentation
		}
		line = strings.TrimPrefix(line, "\t")
		if name := strings.TrimSpace(line[:min(len(line), 11)]); name != "" {
			op = payrouter.Operation(name)
			rows[op] = &row{}
		}
		if op == "" || len(line) <= 11 {
			continue
		}
		cell := strings.Fields(line[11:min(len(line), 22)])
		if len(cell) == 0 {
			continue
		}
		switch word := cell[0]; word {
		case "(default)", "(only)":
			rows[op].def = last
		case "either":
		default:
			last = fallback.Policy(word)
			rows[op].policies = append(rows[op].policies, last)
		}
	}
	for _, o := range []payrouter.Operation{payrouter.OpCharge, payrouter.OpCapture, payrouter.OpVoid, payrouter.OpRefund, payrouter.OpStatus} {
		r := rows[o]
		if r == nil {
			t.Errorf("the package comment's table has no row for %s", o)
			continue
		}
		if want := fallback.Allowed(o); !slices.Equal(r.policies, want) {
			t.Errorf("%s: the table lists %v, the code allows %v", o, r.policies, want)
		}
		if r.def != fallback.Default(o) {
			t.Errorf("%s: the table's default is %q, the code's %q", o, r.def, fallback.Default(o))
		}
		delete(rows, o)
	}
	for o := range rows {
		t.Errorf("the table has a row for %q, which is no operation with a fallback", o)
	}
}
