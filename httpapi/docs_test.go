package httpapi

import (
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/telemetry"
)

// The HTTP API reference, docs/api.md, is kept true by these tests: every route each listener
// serves has its section under that listener's heading and every section names a route, and
// every problem type the one table of problem.go knows is documented with its status.

const apiDoc = "../docs/api.md"

// routeHeading is a section heading naming a route: ### `POST /charge/{id}/refund`.
var routeHeading = regexp.MustCompile("^#{3,4} `(GET|HEAD|POST|PUT|PATCH|DELETE) ([^`]+)`$")

// echoParam is a path parameter as echo writes it (:id); the reference writes {id}.
var echoParam = regexp.MustCompile(`:([A-Za-z_]+)`)

// documentedRoutes returns the routes named by the section headings under each "## " heading of
// docs/api.md, by that heading's text.
func documentedRoutes(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(apiDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	part := ""
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			part = h
			continue
		}
		if m := routeHeading.FindStringSubmatch(line); m != nil {
			out[part] = append(out[part], m[1]+" "+m[2])
		}
	}
	return out
}

// servedRoutes lists the routes an echo handler serves, as the reference writes them, leaving
// out the catch-all that a group's middleware adds to answer 404 under its prefix.
func servedRoutes(t *testing.T, h http.Handler) []string {
	t.Helper()
	e, ok := h.(*echo.Echo)
	if !ok {
		t.Fatalf("the handler is a %T, not an *echo.Echo: this test cannot list its routes", h)
	}
	var out []string
	for _, r := range e.Router().Routes() {
		if r.Method == echo.RouteNotFound {
			continue
		}
		out = append(out, r.Method+" "+echoParam.ReplaceAllString(r.Path, "{$1}"))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestAPIDocRoutes: every route of the storefront and admin listeners is a section of
// docs/api.md under "## Storefront API" and "## Admin API", and every route section there is a
// route the listener serves.
func TestAPIDocRoutes(t *testing.T) {
	deps := Deps{Metrics: telemetry.NewMetrics()}
	doc := documentedRoutes(t)
	for _, l := range []struct {
		part    string
		handler http.Handler
	}{
		{"Storefront API", NewServer(deps)},
		{"Admin API", NewAdminServer(deps)},
	} {
		served := servedRoutes(t, l.handler)
		if len(served) < 5 {
			t.Fatalf("%s: only %d routes found: %v", l.part, len(served), served)
		}
		documented := doc[l.part]
		for _, r := range served {
			if !slices.Contains(documented, r) {
				t.Errorf("%s: the %s serves %s, and no section under \"## %s\" names it (### `%s`)", apiDoc, l.part, r, l.part, r)
			}
		}
		for _, r := range documented {
			if !slices.Contains(served, r) {
				t.Errorf("%s: a section under \"## %s\" names %s, which that listener does not serve", apiDoc, l.part, r)
			}
		}
	}
	for part, routes := range doc {
		if part != "Storefront API" && part != "Admin API" {
			t.Errorf("%s: routes %v are under \"## %s\"; a route belongs under its listener's heading", apiDoc, routes, part)
		}
	}
}

// problemRow is a row of the problem types' table: | `/problems/<name>` | <status> | when |.
var problemRow = regexp.MustCompile("^\\| `/problems/([a-z-]+)` \\| ([0-9]{3}) \\|")

// TestAPIDocProblems: every problem type payrouter answers (problemTypes, the one table) is in
// docs/api.md with its status, and every problem type listed there is one payrouter answers.
func TestAPIDocProblems(t *testing.T) {
	data, err := os.ReadFile(apiDoc)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := problemRow.FindStringSubmatch(line); m != nil {
			documented[m[1]], _ = strconv.Atoi(m[2])
		}
	}
	for _, code := range slices.Sorted(maps.Keys(problemTypes)) {
		want := problemTypes[code].status
		switch got, ok := documented[string(code)]; {
		case !ok:
			t.Errorf("%s: the problem type /problems/%s (%d) is not in the problems' table", apiDoc, code, want)
		case got != want:
			t.Errorf("%s: /problems/%s is documented as %d; payrouter answers it with %d", apiDoc, code, got, want)
		}
	}
	for code := range documented {
		if _, ok := problemTypes[payrouter.ErrorCode(code)]; !ok {
			t.Errorf("%s: documents /problems/%s, which payrouter never answers", apiDoc, code)
		}
	}
}
