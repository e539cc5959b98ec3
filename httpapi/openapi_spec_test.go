package httpapi_test

// The spec side of the OpenAPI check: api/openapi.yaml loaded and validated by kin-openapi
// (OpenAPI 3.1, schemas as JSON Schema 2020-12), the project's own rules for it (lintSpec), one
// exchange checked against it (check), and what the exchanges covered (coverage).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

func init() {
	// The status page and its script: their schemas are plain strings.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/javascript", openapi3filter.PlainBodyDecoder)
}

// ignoredHeaders are HTTP's own framing headers, which the spec does not document.
var ignoredHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Date": true, "Content-Encoding": true, "Transfer-Encoding": true,
}

// openAPI is the loaded spec and a router that finds an exchange's operation by server and path.
type openAPI struct {
	doc    *openapi3.T
	router routers.Router
}

func loadSpec(t *testing.T) *openAPI {
	t.Helper()
	data, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := parseOpenAPI(data)
	if err != nil {
		t.Fatalf("%s:\n%v", specFile, err)
	}
	return spec
}

// parseOpenAPI loads a spec, validates it as OpenAPI and against the project's rules.
func parseOpenAPI(data []byte) (*openAPI, error) {
	doc, err := openapi3.NewLoader().LoadFromData(data)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	if errs := lintSpec(doc); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &openAPI{doc: doc, router: router}, nil
}

// pathItem is one documented path with the servers (listeners) it is served on.
type pathItem struct {
	template string
	segs     []string
	item     *openapi3.PathItem
	servers  []string
}

var httpMethods = []string{"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"}

func (o *openAPI) paths() []pathItem {
	return pathsOf(o.doc)
}

func pathsOf(doc *openapi3.T) []pathItem {
	var out []pathItem
	for _, tmpl := range slices.Sorted(maps.Keys(doc.Paths.Map())) {
		item := doc.Paths.Value(tmpl)
		servers := doc.Servers
		if len(item.Servers) > 0 {
			servers = item.Servers
		}
		var urls []string
		for _, s := range servers {
			urls = append(urls, s.URL)
		}
		out = append(out, pathItem{template: tmpl, segs: strings.Split(strings.Trim(tmpl, "/"), "/"), item: item, servers: urls})
	}
	return out
}

// operation is one documented operation.
type operation struct {
	key      string // "POST /charge"
	op       *openapi3.Operation
	security []string // the names of its security schemes
}

func operationsOf(doc *openapi3.T) []operation {
	var out []operation
	for _, p := range pathsOf(doc) {
		for _, m := range httpMethods {
			op := p.item.GetOperation(m)
			if op == nil {
				continue
			}
			sec := doc.Security
			if op.Security != nil {
				sec = *op.Security
			}
			var names []string
			for _, req := range sec {
				names = append(names, slices.Sorted(maps.Keys(req))...)
			}
			out = append(out, operation{key: m + " " + p.template, op: op, security: names})
		}
	}
	return out
}

// problemTypes is a response's x-problem-types: the problem types it may carry.
func problemTypes(r *openapi3.Response) ([]string, bool) {
	v, ok := r.Extensions["x-problem-types"]
	if !ok {
		return nil, false
	}
	list, _ := v.([]any)
	out := []string{}
	for _, e := range list {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out, true
}

var statusCode = regexp.MustCompile(`^[1-5][0-9][0-9]$`)

// lintSpec checks what kin-openapi's validation does not and the check relies on: which
// listener serves each path, what every response documents, the problem types, which answers
// credentials imply, and that every object schema says what other members it allows.
func lintSpec(doc *openapi3.T) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		add("openapi: %q, want 3.1.x", doc.OpenAPI)
	}
	paths := pathsOf(doc)
	if len(paths) == 0 {
		add("paths: none")
	}
	for _, p := range paths {
		for _, s := range p.servers {
			if s != storefrontURL && s != adminURL {
				add("paths.%s: server %s is neither the storefront (%s) nor the admin API (%s)", p.template, s, storefrontURL, adminURL)
			}
		}
	}
	ids := map[string]string{}
	for _, op := range operationsOf(doc) {
		switch other, dup := ids[op.op.OperationID]; {
		case op.op.OperationID == "":
			add("%s: no operationId", op.key)
		case dup:
			add("%s: operationId %s is %s's too", op.key, op.op.OperationID, other)
		}
		ids[op.op.OperationID] = op.key
		if op.op.Responses.Len() == 0 {
			add("%s: no responses", op.key)
		}
		for code, ref := range op.op.Responses.Map() {
			key := op.key + " " + code
			if !statusCode.MatchString(code) {
				add("%s: a status must be a three-digit code", key)
			}
			r := ref.Value
			if _, ok := r.Headers["X-Request-Id"]; !ok {
				add("%s: X-Request-Id is not documented; every response carries it", key)
			}
			types, hasTypes := problemTypes(r)
			problem := r.Content.Get("application/problem+json")
			switch {
			case problem != nil && !hasTypes:
				add("%s: a problem response names its problem types in x-problem-types", key)
			case hasTypes && problem == nil:
				add("%s: x-problem-types on a response that is not application/problem+json", key)
			case problem != nil:
				if len(types) == 0 {
					add("%s: x-problem-types is empty", key)
				}
				var enum []any
				if t := problem.Schema.Value.Properties["type"]; t != nil {
					enum = t.Value.Enum
				}
				for _, pt := range types {
					if !slices.Contains(enum, any(pt)) {
						add("%s: problem type %v is not in the type enum of its schema", key, pt)
					}
				}
			}
		}
		has := func(code int) bool { return op.op.Responses.Status(code) != nil }
		switch {
		case len(op.security) > 0 && !has(401):
			add("%s: needs credentials but documents no 401", op.key)
		case len(op.security) == 0 && has(401):
			add("%s: needs no credentials but documents 401", op.key)
		}
		if len(op.security) > 0 && !has(429) {
			add("%s: needs credentials but documents no 429 (the failed-auth throttle answers it)", op.key)
		}
		if slices.Contains(op.security, "adminToken") && !has(403) {
			add("%s: an admin operation answers 403 while no admin token is configured", op.key)
		}
	}
	for _, s := range schemasOf(doc) {
		add("%v", s)
	}
	return errs
}

// schemasOf lints every schema the spec holds: an object says additionalProperties (false, or
// their schema: never true, so that an undocumented member fails), an array says items, and
// required names only properties it has.
func schemasOf(doc *openapi3.T) []error {
	var errs []error
	seen := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef, at string)
	walk = func(ref *openapi3.SchemaRef, at string) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		if ref.Ref != "" {
			at = strings.TrimPrefix(ref.Ref, "#/components/schemas/")
		}
		s := ref.Value
		seen[s] = true
		if s.Type.Is("object") || len(s.Properties) > 0 {
			ap := s.AdditionalProperties
			switch {
			case ap.Has == nil && ap.Schema == nil:
				errs = append(errs, fmt.Errorf("%s: an object schema must say additionalProperties (false, or their schema)", at))
			case ap.Has != nil && *ap.Has:
				errs = append(errs, fmt.Errorf("%s: additionalProperties true: say false, or give their schema", at))
			}
		}
		if s.Type.Is("array") && s.Items == nil {
			errs = append(errs, fmt.Errorf("%s: an array schema must say items", at))
		}
		for _, r := range s.Required {
			if s.Properties[r] == nil {
				errs = append(errs, fmt.Errorf("%s: required %s is not one of its properties", at, r))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
			walk(s.Properties[name], at+"."+name)
		}
		walk(s.Items, at+"[]")
		walk(s.AdditionalProperties.Schema, at+".*")
		for _, list := range [][]*openapi3.SchemaRef{s.AnyOf, s.OneOf, s.AllOf} {
			for _, sub := range list {
				walk(sub, at)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Components.Schemas)) {
		walk(doc.Components.Schemas[name], name)
	}
	for _, op := range operationsOf(doc) {
		for _, p := range op.op.Parameters {
			walk(p.Value.Schema, op.key+" "+p.Value.Name)
		}
		if op.op.RequestBody != nil {
			for mt, media := range op.op.RequestBody.Value.Content {
				walk(media.Schema, op.key+" request "+mt)
			}
		}
		for code, r := range op.op.Responses.Map() {
			for mt, media := range r.Value.Content {
				walk(media.Schema, op.key+" "+code+" "+mt)
			}
		}
	}
	return errs
}

// exchange is one request and its answer, as the check sees them.
type exchange struct {
	server       string // the spec's server URL of the listener
	method, path string
	reqHeader    http.Header
	reqBody      []byte
	status       int
	header       http.Header
	body         []byte
}

// bearerPresent stands for the security schemes (all HTTP bearer): a request the server
// accepted must have carried the credential the spec says the operation needs.
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s := in.SecurityScheme
	if s.Type != "http" || !strings.EqualFold(s.Scheme, "bearer") {
		return fmt.Errorf("security scheme %s: the check knows only HTTP bearer schemes", in.SecuritySchemeName)
	}
	if !strings.HasPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
		return in.NewError(errors.New("no Authorization: Bearer header"))
	}
	return nil
}

// check validates an answer against the spec and records what it covered (cov nil: nothing):
// the operation and status are documented on that listener, every header is documented and
// valid, the body is valid by its schema (kin-openapi), a problem's type is one its answer
// documents and its status the answer's, and a request the server accepted is valid by the spec.
func (o *openAPI) check(ex exchange, cov *coverage) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	req, err := http.NewRequest(ex.method, ex.server+ex.path, bytes.NewReader(ex.reqBody))
	if err != nil {
		return []string{err.Error()}
	}
	maps.Copy(req.Header, ex.reqHeader)
	route, params, err := o.router.FindRoute(req)
	switch {
	case errors.Is(err, routers.ErrMethodNotAllowed):
		return []string{fmt.Sprintf("%s %s is not documented on %s", ex.method, req.URL.Path, ex.server)}
	case err != nil:
		return []string{fmt.Sprintf("the path %s is not documented on %s: %v", req.URL.Path, ex.server, err)}
	}
	opKey := ex.method + " " + route.Path
	ref := route.Operation.Responses.Status(ex.status)
	if ref == nil {
		return []string{fmt.Sprintf("status %d is not documented for %s", ex.status, opKey)}
	}
	resp, key := ref.Value, opKey+" "+strconv.Itoa(ex.status)
	cov.add("status", key)

	documented := map[string]string{} // canonical name: the spec's
	for name := range resp.Headers {
		documented[http.CanonicalHeaderKey(name)] = name
	}
	for _, name := range slices.Sorted(maps.Keys(ex.header)) {
		if ignoredHeaders[name] {
			continue
		}
		specName, ok := documented[http.CanonicalHeaderKey(name)]
		if !ok {
			fail("header %s is not documented for %s", name, key)
			continue
		}
		cov.add("header", key+" "+specName)
	}
	if len(resp.Content) == 0 && len(ex.body) > 0 {
		fail("%s documents no body, yet one came: %s", key, clip(ex.body))
	}

	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: bearerPresent, RejectWhenRequestBodyNotSpecified: true},
	}
	respOptions := &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true}
	respOptions.WithCustomSchemaErrorFunc(schemaError)
	in.Options.WithCustomSchemaErrorFunc(schemaError)
	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: ex.status, Header: ex.header, Options: respOptions,
	}
	rin.SetBodyBytes(ex.body)
	for _, e := range unpack(openapi3filter.ValidateResponse(context.Background(), rin)) {
		fail("%s", e)
	}

	var body any
	if mt := resp.Content.Get(ex.header.Get("Content-Type")); mt != nil && strings.Contains(ex.header.Get("Content-Type"), "json") {
		if err := json.Unmarshal(ex.body, &body); err == nil {
			cov.fields(mt.Schema, body)
		}
	}
	if types, ok := problemTypes(resp); ok {
		obj, _ := body.(map[string]any)
		pt, _ := obj["type"].(string)
		if !slices.Contains(types, pt) {
			fail("problem type %q is not documented for %s (documented: %v)", pt, key, types)
		} else {
			cov.add("problem type", key+" "+pt)
		}
		if s, _ := obj["status"].(float64); s != float64(ex.status) {
			fail("the problem's status %v is not the answer's %d", obj["status"], ex.status)
		}
	}

	// What the server accepted, the spec must accept: the request of a 2xx answer is valid.
	if ex.status < 300 {
		req.Body = io.NopCloser(bytes.NewReader(ex.reqBody))
		for _, e := range unpack(openapi3filter.ValidateRequest(context.Background(), in)) {
			fail("accepted, yet not valid by the spec: %s", e)
		}
	}
	return errs
}

// schemaError names the member and the rule it broke: the schema and the value kin-openapi
// dumps beside them by default would bury that in every failure.
func schemaError(err *openapi3.SchemaError) string {
	return fmt.Sprintf("at /%s: %s", strings.Join(err.JSONPointer(), "/"), err.Reason)
}

// unpack lists the errors a MultiError holds, each on its own and named by what kin-openapi
// was validating (a header, a parameter, the body).
func unpack(err error) []string {
	if err == nil {
		return nil
	}
	var within string
	var multi openapi3.MultiError
	switch e := err.(type) {
	case openapi3.MultiError:
		multi = e
	case *openapi3filter.ResponseError:
		if m, ok := e.Err.(openapi3.MultiError); ok {
			within, multi = e.Reason, m
		}
	case *openapi3filter.RequestError:
		if m, ok := e.Err.(openapi3.MultiError); ok {
			outer := *e
			outer.Err = nil
			within, multi = outer.Error(), m
		}
	}
	if multi == nil {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range multi {
		for _, msg := range unpack(e) {
			if within != "" {
				msg = within + ": " + msg
			}
			out = append(out, msg)
		}
	}
	return out
}

// ---- coverage ----------------------------------------------------------------------------

// field is one documented property of one schema.
type field struct {
	schema *openapi3.Schema
	name   string
}

// coverage records what the answers showed: statuses per operation ("POST /charge 201"),
// headers per answer, problem types per answer, and the properties of the schemas that came.
type coverage struct {
	mu                          sync.Mutex
	statuses, headers, problems map[string]bool
	seen                        map[field]bool
}

func newCoverage() *coverage {
	return &coverage{statuses: map[string]bool{}, headers: map[string]bool{}, problems: map[string]bool{}, seen: map[field]bool{}}
}

// add records one key of a kind: "status", "header" or "problem type". A nil coverage records
// nothing.
func (c *coverage) add(kind, key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sets()[kind][key] = true
}

func (c *coverage) sets() map[string]map[string]bool {
	return map[string]map[string]bool{"status": c.statuses, "header": c.headers, "problem type": c.problems}
}

// fields records the properties of a valid value by the schemas that document them.
func (c *coverage) fields(ref *openapi3.SchemaRef, v any) {
	if c == nil || ref == nil || ref.Value == nil {
		return
	}
	s := ref.Value
	switch x := v.(type) {
	case map[string]any:
		for name, member := range x {
			if p := s.Properties[name]; p != nil {
				c.mu.Lock()
				c.seen[field{s, name}] = true
				c.mu.Unlock()
				c.fields(p, member)
			} else {
				c.fields(s.AdditionalProperties.Schema, member)
			}
		}
	case []any:
		for _, e := range x {
			c.fields(s.Items, e)
		}
	}
}

// documentedFields lists every property of every object schema a response can carry, each
// with its name as a reader finds it ("Charge.stale", "GET /admin/breakers 200.breakers").
func documentedFields(doc *openapi3.T) map[field]string {
	out := map[field]string{}
	walked := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef, at string)
	walk = func(ref *openapi3.SchemaRef, at string) {
		if ref == nil || ref.Value == nil || walked[ref.Value] {
			return
		}
		walked[ref.Value] = true
		if ref.Ref != "" {
			at = strings.TrimPrefix(ref.Ref, "#/components/schemas/")
		}
		s := ref.Value
		for name, p := range s.Properties {
			out[field{s, name}] = at + "." + name
			walk(p, at+"."+name)
		}
		walk(s.Items, at+"[]")
		walk(s.AdditionalProperties.Schema, at+".*")
	}
	for _, op := range operationsOf(doc) {
		for _, code := range slices.Sorted(maps.Keys(op.op.Responses.Map())) {
			for _, mt := range slices.Sorted(maps.Keys(op.op.Responses.Value(code).Value.Content)) {
				walk(op.op.Responses.Value(code).Value.Content[mt].Schema, op.key+" "+code)
			}
		}
	}
	return out
}

// verify fails for every documented answer, header, problem type and response field that was
// never produced and is not allowed to be missing.
func (c *coverage) verify(t *testing.T, o *openAPI) {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := map[string][]string{}
	for _, op := range operationsOf(o.doc) {
		for code, ref := range op.op.Responses.Map() {
			key := op.key + " " + code
			want["status"] = append(want["status"], key)
			for name := range ref.Value.Headers {
				want["header"] = append(want["header"], key+" "+name)
			}
			types, _ := problemTypes(ref.Value)
			for _, pt := range types {
				want["problem type"] = append(want["problem type"], key+" "+pt)
			}
		}
	}
	seen := c.sets()
	for _, kind := range slices.Sorted(maps.Keys(want)) {
		slices.Sort(want[kind])
		for _, key := range slices.Compact(want[kind]) {
			if seen[kind][key] || kind == "status" && specNotProduced[key] != "" {
				continue
			}
			t.Errorf("documented %s never produced: %s", kind, key)
		}
	}
	var missing []string
	for f, name := range documentedFields(o.doc) {
		if !c.seen[f] && specFieldsNotProduced[name] == "" {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	for _, name := range missing {
		t.Errorf("documented field never produced: %s", name)
	}
	for key := range specNotProduced {
		if c.statuses[key] {
			t.Errorf("%s is produced now: take it off specNotProduced", key)
		}
	}
}
