package telemetry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.yaml.in/yaml/v3"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// The dashboard (configs/grafana/payrouter.json) and the alert rules (configs/prometheus/alerts.yml)
// are checked against what this package really exports: a renamed metric or label breaks a panel
// or an alert silently (an empty graph, an alert that never fires), so it must break this test.
// The PromQL is read by a small scanner (scanPromQL), not a parser: it finds selectors, their
// matchers, the label lists of by/without/on/ignoring/group_left/group_right and the functions
// called; it does not infer what labels survive an inner aggregation.

const (
	dashboardFile = "../configs/grafana/payrouter.json"
	alertsFile    = "../configs/prometheus/alerts.yml"
)

// targetLabels are added by Prometheus to every scraped series.
var targetLabels = []string{"instance", "job"}

// exportedSeries returns every series name payrouter exports with its label names, from a real
// NewMetrics with each collector exercised once (a vector with no child is not gathered):
// counters and gauges by name, histograms as their _bucket (with le), _sum and _count series,
// summaries (the Go collector's) with quantile and their _sum and _count.
func exportedSeries(t *testing.T) map[string][]string {
	t.Helper()
	m := NewMetrics()
	o := NewObserver(m, NewLogger(io.Discard, slog.LevelInfo))
	const gw, op = "paywell", payrouter.OpCharge
	m.InitBreaker(gw, op, resilience.StateClosed)
	m.BreakerCooldown(gw, op, 30*time.Second)
	m.BreakerForced(gw, op, payrouter.ForcedNone)
	o.BreakerTransition(gw, op, resilience.StateClosed, resilience.StateOpen, resilience.Counts{}, 30*time.Second)
	o.BreakerRejected(gw, op)
	o.CallDone(t.Context(), gw, op, payrouter.OutcomeTimeout, time.Second)
	m.InitBulkhead(gw, 20)
	o.BulkheadChanged(gw, 1, 20)
	o.BulkheadRejected(gw)
	o.ProbeDone(gw, true, time.Millisecond)
	m.ChargeAnswered(gw, payrouter.StatusSucceeded)
	m.FallbackUsed(payrouter.OpRefund, "queue")
	m.HTTPRequest(t.Context(), "POST /charge", 201, time.Millisecond)
	m.StateStoreUp(true)
	m.QueueDepth(3)
	r := m.RouterObserver()
	r.HedgeDone("won_hedge")
	r.ChargeReconciled(payrouter.StatusSucceeded, time.Minute)
	m.InitWebhookEndpoints([]string{"shop"}, nil)
	m.Dispatched("shop", 1)
	m.Attempted("shop", "delivered", time.Second, 2*time.Second)
	m.InFlight("shop", 1)
	m.EndpointDisabled("shop", false)
	m.Backlog(1, 0)

	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string][]string{}
	add := func(name string, labels []string, extra ...string) {
		for _, l := range slices.Concat(labels, extra) {
			if !slices.Contains(series[name], l) {
				series[name] = append(series[name], l)
			}
		}
		if series[name] == nil {
			series[name] = []string{}
		}
	}
	for _, f := range families {
		var labels []string
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		name := f.GetName()
		switch f.GetType().String() {
		case "HISTOGRAM":
			add(name+"_bucket", labels, "le")
			add(name+"_sum", labels)
			add(name+"_count", labels)
		case "SUMMARY":
			add(name, labels, "quantile")
			add(name+"_sum", labels)
			add(name+"_count", labels)
		default:
			add(name, labels)
		}
	}
	return series
}

// promQL is what scanPromQL found in one expression.
type promQL struct {
	selectors []selector
	groupings []grouping
}

type selector struct {
	metric   string
	matchers []matcher
}

type matcher struct{ label, op, value string }

// grouping is a label list: by, without, on, ignoring, group_left or group_right, and the
// selectors (indexes into promQL.selectors) it applies to: for by and without the aggregated
// expression, for the others the parenthesised expression around the binary operation.
type grouping struct {
	keyword string
	labels  []string
	scope   []int
}

type token struct {
	kind byte // 'i' identifier, 's' string, 'n' number or duration, 'v' Grafana variable, 'r' [range], 'p' punctuation
	text string
}

func lexPromQL(expr string) ([]token, error) {
	var toks []token
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' }
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, token{'s', expr[i+1 : j]})
			i = j + 1
		case c == '[':
			j := strings.IndexByte(expr[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unterminated [ at %d", i)
			}
			toks = append(toks, token{'r', expr[i : i+j+1]})
			i += j + 1
		case c == '$':
			j := i + 1
			if j < len(expr) && expr[j] == '{' {
				k := strings.IndexByte(expr[j:], '}')
				if k < 0 {
					return nil, fmt.Errorf("unterminated ${ at %d", i)
				}
				j += k + 1
			} else {
				for j < len(expr) && (isIdentStart(expr[j]) || isDigit(expr[j])) {
					j++
				}
			}
			toks = append(toks, token{'v', expr[i:j]})
			i = j
		case isIdentStart(c):
			j := i + 1
			for j < len(expr) && (isIdentStart(expr[j]) || isDigit(expr[j])) {
				j++
			}
			toks = append(toks, token{'i', expr[i:j]})
			i = j
		case isDigit(c) || c == '.' && i+1 < len(expr) && isDigit(expr[i+1]):
			j := i + 1
			for j < len(expr) && (isDigit(expr[j]) || isIdentStart(expr[j]) || expr[j] == '.' ||
				(expr[j] == '+' || expr[j] == '-') && (expr[j-1] == 'e' || expr[j-1] == 'E')) {
				j++
			}
			toks = append(toks, token{'n', expr[i:j]})
			i = j
		default:
			if i+1 < len(expr) && slices.Contains([]string{"==", "!=", ">=", "<=", "=~", "!~"}, expr[i:i+2]) {
				toks = append(toks, token{'p', expr[i : i+2]})
				i += 2
				continue
			}
			if !strings.ContainsRune("(){},=<>+-*/%^@:", rune(c)) {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			toks = append(toks, token{'p', string(c)})
			i++
		}
	}
	return toks, nil
}

// promqlFunctions are PromQL's functions.
var promqlFunctions = strings.Fields(`abs absent absent_over_time avg_over_time ceil changes clamp clamp_max clamp_min
	count_over_time day_of_month day_of_week day_of_year days_in_month delta deriv exp floor histogram_avg
	histogram_count histogram_fraction histogram_quantile histogram_stddev histogram_stdvar histogram_sum
	holt_winters double_exponential_smoothing hour idelta increase irate label_join label_replace last_over_time ln
	log10 log2 mad_over_time max_over_time min_over_time minute month predict_linear present_over_time
	quantile_over_time rate resets round scalar sgn sort sort_desc sort_by_label sort_by_label_desc sqrt
	stddev_over_time stdvar_over_time sum_over_time time timestamp vector year acos acosh asin asinh atan atanh
	cos cosh deg pi rad sin sinh tan tanh start end`)

// promqlAggregations are PromQL's aggregation operators, the only names by and without follow.
var promqlAggregations = strings.Fields(`sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio`)

var (
	groupingKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	operatorKeywords = []string{"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
)

// scanPromQL finds the selectors and label lists of a PromQL expression.
func scanPromQL(expr string) (promQL, error) {
	var q promQL
	toks, err := lexPromQL(expr)
	if err != nil {
		return q, err
	}
	isP := func(i int, s string) bool { return i >= 0 && i < len(toks) && toks[i].kind == 'p' && toks[i].text == s }
	closeOf, openOf := map[int]int{}, map[int]int{}
	var stack []int
	for i := range toks {
		switch {
		case isP(i, "("):
			stack = append(stack, i)
		case isP(i, ")"):
			if len(stack) == 0 {
				return q, fmt.Errorf("unbalanced )")
			}
			o := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			closeOf[o], openOf[i] = i, o
		}
	}
	if len(stack) > 0 {
		return q, fmt.Errorf("unbalanced (")
	}

	type pendingGrouping struct {
		g        grouping
		from, to int // token range of the scope
	}
	var pending []pendingGrouping
	selectorAt := map[int]int{} // token index -> selector index
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		if isP(i, "{") {
			return q, fmt.Errorf("a selector without a metric name")
		}
		if tk.kind != 'i' {
			continue
		}
		word := strings.ToLower(tk.text)
		switch {
		case slices.Contains(groupingKeywords, word):
			if !isP(i+1, "(") {
				if word == "group_left" || word == "group_right" {
					continue
				}
				return q, fmt.Errorf("%s without a label list", word)
			}
			end := closeOf[i+1]
			g := grouping{keyword: word}
			for j := i + 2; j < end; j++ {
				switch {
				case toks[j].kind == 'i':
					g.labels = append(g.labels, toks[j].text)
				case !isP(j, ","):
					return q, fmt.Errorf("%s (...) holds %q", word, toks[j].text)
				}
			}
			from, to := 0, len(toks)
			switch {
			case (word == "by" || word == "without") && isP(end+1, "("):
				from, to = end+1, closeOf[end+1]
			case word == "by" || word == "without":
				if !isP(i-1, ")") {
					return q, fmt.Errorf("%s (...) aggregates nothing", word)
				}
				from, to = openOf[i-1], i-1
			default: // on, ignoring, group_*: the innermost parentheses around the operation
				for o, c := range closeOf {
					if o < i && i < c && o >= from {
						from, to = o, c
					}
				}
			}
			pending = append(pending, pendingGrouping{g, from, to})
			i = end
		case slices.Contains(operatorKeywords, word):
		case i+1 < len(toks) && toks[i+1].kind == 'i' && slices.Contains([]string{"by", "without"}, strings.ToLower(toks[i+1].text)):
			if !slices.Contains(promqlAggregations, word) {
				return q, fmt.Errorf("%s %s: not an aggregation", tk.text, toks[i+1].text)
			}
		case isP(i+1, "("):
			if !slices.Contains(promqlFunctions, word) && !slices.Contains(promqlAggregations, word) {
				return q, fmt.Errorf("unknown function %s()", tk.text)
			}
		default:
			s := selector{metric: tk.text}
			if isP(i+1, "{") {
				j := i + 2
				for ; j < len(toks) && !isP(j, "}"); j++ {
					if isP(j, ",") {
						continue
					}
					if j+2 >= len(toks) || toks[j].kind != 'i' || toks[j+1].kind != 'p' || toks[j+2].kind != 's' {
						return q, fmt.Errorf("bad matcher in %s{...}", tk.text)
					}
					s.matchers = append(s.matchers, matcher{toks[j].text, toks[j+1].text, toks[j+2].text})
					j += 2
				}
				if j >= len(toks) {
					return q, fmt.Errorf("unterminated %s{", tk.text)
				}
				selectorAt[i] = len(q.selectors)
				i = j
			} else {
				selectorAt[i] = len(q.selectors)
			}
			q.selectors = append(q.selectors, s)
		}
	}
	for _, p := range pending {
		for ti, si := range selectorAt {
			if p.from <= ti && ti <= p.to {
				p.g.scope = append(p.g.scope, si)
			}
		}
		slices.Sort(p.g.scope)
		q.groupings = append(q.groupings, p.g)
	}
	return q, nil
}

var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// checkPromQL returns what is wrong with expr against the exported series: unknown metrics,
// labels a selector's metric does not have, by/without labels missing from a metric they
// aggregate, on/ignoring/group labels no metric around them has, and legend labels that are not
// in the result. With gatewayFilter, every selector of a metric labelled gateway must filter on
// the $gateway variable.
func checkPromQL(expr, legend string, exported map[string][]string, gatewayFilter bool) []string {
	q, err := scanPromQL(expr)
	if err != nil {
		return []string{fmt.Sprintf("cannot read %q: %v", expr, err)}
	}
	var problems []string
	has := func(metric, label string) bool {
		return slices.Contains(exported[metric], label) || slices.Contains(targetLabels, label)
	}
	for _, s := range q.selectors {
		if _, ok := exported[s.metric]; !ok {
			problems = append(problems, fmt.Sprintf("payrouter exports no metric %s (a new collector? exercise it in exportedSeries)", s.metric))
			continue
		}
		filtered := false
		for _, m := range s.matchers {
			if !has(s.metric, m.label) {
				problems = append(problems, fmt.Sprintf("%s has no label %s (it has %v)", s.metric, m.label, exported[s.metric]))
			}
			if m.label == "gateway" && m.op == "=~" && (m.value == "$gateway" || m.value == "${gateway}") {
				filtered = true
			}
		}
		if gatewayFilter && slices.Contains(exported[s.metric], "gateway") && !filtered {
			problems = append(problems, fmt.Sprintf(`%s is not filtered by the gateway variable: add gateway=~"$gateway"`, s.metric))
		}
	}
	var byLabels []string
	for _, g := range q.groupings {
		if len(g.scope) == 0 {
			problems = append(problems, fmt.Sprintf("%s (%s) applies to no metric", g.keyword, strings.Join(g.labels, ", ")))
			continue
		}
		if g.keyword == "by" {
			byLabels = append(byLabels, g.labels...)
		}
		for _, l := range g.labels {
			var with, without []string
			for _, si := range g.scope {
				s := q.selectors[si]
				if _, known := exported[s.metric]; !known {
					continue // reported above
				}
				if has(s.metric, l) {
					with = append(with, s.metric)
				} else {
					without = append(without, s.metric)
				}
			}
			switch {
			case (g.keyword == "by" || g.keyword == "without") && len(without) > 0:
				problems = append(problems, fmt.Sprintf("%s (...%s...): %s has no label %s", g.keyword, l, strings.Join(without, ", "), l))
			case len(with) == 0 && len(without) > 0:
				problems = append(problems, fmt.Sprintf("%s (...%s...): none of %s has label %s", g.keyword, l, strings.Join(without, ", "), l))
			}
		}
	}
	for _, m := range legendLabel.FindAllStringSubmatch(legend, -1) {
		l := m[1]
		if len(byLabels) > 0 {
			if !slices.Contains(byLabels, l) {
				problems = append(problems, fmt.Sprintf("legend {{%s}}: not in the result, which keeps only %v", l, byLabels))
			}
			continue
		}
		if !slices.ContainsFunc(q.selectors, func(s selector) bool { return has(s.metric, l) }) {
			problems = append(problems, fmt.Sprintf("legend {{%s}}: no metric of the query has that label", l))
		}
	}
	return problems
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int     `json:"id"`
	Type        string  `json:"type"`
	Title       string  `json:"title"`
	Description string  `json:"description"`
	Datasource  *dsRef  `json:"datasource"`
	Panels      []panel `json:"panels"`
	Targets     []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
		Datasource   *dsRef `json:"datasource"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Mappings []struct {
				Type    string `json:"type"`
				Options map[string]struct {
					Text  string `json:"text"`
					Color string `json:"color"`
				} `json:"options"`
			} `json:"mappings"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type dashboard struct {
	SchemaVersion int `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

var labelValues = regexp.MustCompile(`^label_values\(\s*(.+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// checkDashboard returns what is wrong with a dashboard's JSON: its variables, every panel's
// kind, description and data source, every query (checkPromQL, with the gateway filter), and
// the breaker state colours.
func checkDashboard(data []byte, exported map[string][]string) []string {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return []string{err.Error()}
	}
	var problems []string
	if d.SchemaVersion < 36 {
		problems = append(problems, fmt.Sprintf("schemaVersion %d: Grafana 10 or later writes 36 and above", d.SchemaVersion))
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Name {
		case "datasource":
			var q string
			if v.Type != "datasource" || json.Unmarshal(v.Query, &q) != nil || q != "prometheus" {
				problems = append(problems, "variable datasource: want type datasource, query prometheus")
			}
		case "gateway":
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil {
				_ = json.Unmarshal(v.Query, &q.Query) // the older form: the query as a string
			}
			m := labelValues.FindStringSubmatch(q.Query)
			if v.Type != "query" || !v.Multi || !v.IncludeAll || m == nil {
				problems = append(problems, fmt.Sprintf("variable gateway: want a multi, include-all label_values query, got %q", q.Query))
				continue
			}
			if m[2] != "gateway" {
				problems = append(problems, fmt.Sprintf("variable gateway lists label %s", m[2]))
			}
			for _, p := range checkPromQL(fmt.Sprintf("count by (%s) (%s)", m[2], m[1]), "", exported, false) {
				problems = append(problems, "variable gateway: "+p)
			}
		}
	}
	for _, want := range []string{"datasource", "gateway"} {
		if !vars[want] {
			problems = append(problems, "no variable "+want)
		}
	}

	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if !slices.Contains([]string{"state-timeline", "timeseries", "stat"}, p.Type) {
				problems = append(problems, fmt.Sprintf("%s: type %s", where, p.Type))
			}
			if strings.TrimSpace(p.Description) == "" {
				problems = append(problems, where+": no description (say what to do when it looks wrong)")
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				problems = append(problems, where+`: data source is not ${datasource}`)
			}
			if len(p.Targets) == 0 {
				problems = append(problems, where+": no query")
			}
			for _, tg := range p.Targets {
				if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
					problems = append(problems, fmt.Sprintf("%s %s: data source is not ${datasource}", where, tg.RefID))
				}
				for _, pr := range checkPromQL(tg.Expr, tg.LegendFormat, exported, true) {
					problems = append(problems, fmt.Sprintf("%s %s: %s\n\texpr: %s", where, tg.RefID, pr, tg.Expr))
				}
				if q, err := scanPromQL(tg.Expr); err == nil && slices.ContainsFunc(q.selectors, func(s selector) bool { return s.metric == "circuit_breaker_state" }) && p.Type == "state-timeline" {
					problems = append(problems, checkStateColours(where, p)...)
				}
			}
		}
	}
	walk(d.Panels)
	return problems
}

// checkStateColours checks the value mappings of a breaker state timeline against
// circuit_breaker_state's values (docs/metrics.md): 0 closed green, 1 open red, 2 half_open yellow.
func checkStateColours(where string, p panel) []string {
	want := map[string][2]string{"0": {"closed", "green"}, "1": {"open", "red"}, "2": {"half_open", "yellow"}}
	var problems []string
	for v, tc := range want {
		found := false
		for _, m := range p.FieldConfig.Defaults.Mappings {
			if o, ok := m.Options[v]; ok && m.Type == "value" {
				found = true
				if o.Text != tc[0] || o.Color != tc[1] {
					problems = append(problems, fmt.Sprintf("%s: value %s shows %s in %s, want %s in %s", where, v, o.Text, o.Color, tc[0], tc[1]))
				}
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("%s: no value mapping for %s (%s)", where, v, tc[0]))
		}
	}
	return problems
}

func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	exported := exportedSeries(t)
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkDashboard(data, exported) {
		t.Error(p)
	}

	t.Run("a typo in the dashboard fails", func(t *testing.T) {
		for _, tc := range []struct{ from, to, want string }{
			{`(rate(payrouter_hedges_total[`, `(rate(payrouter_hedge_total[`, "no metric payrouter_hedge_total"},
			{`sum by (gateway, outcome, instance)`, `sum by (gateway, outcome, instnce)`, "no label instnce"},
			{`"text": "half_open"`, `"text": "half-open"`, "value 2 shows half-open"},
		} {
			broken := bytes.Replace(data, []byte(tc.from), []byte(tc.to), 1)
			if bytes.Equal(broken, data) {
				t.Fatalf("%s is not in the dashboard any more: update this test", tc.from)
			}
			problems := checkDashboard(broken, exported)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("%s -> %s: want a problem saying %q, got %q", tc.from, tc.to, tc.want, problems)
			}
		}
	})
}

func TestPromQLCheckCatchesMistakes(t *testing.T) {
	exported := exportedSeries(t)
	for _, tc := range []struct {
		name, expr, legend string
		want               string // part of the problem reported; "" for none
	}{
		{"a good query", `sum by (gateway, status) (rate(payrouter_charges_total{gateway=~"$gateway"}[$__rate_interval]))`, "{{gateway}} {{status}}", ""},
		{"a good histogram quantile", `histogram_quantile(0.9, sum(rate(payrouter_gateway_request_duration_seconds_bucket{gateway=~"${gateway}", outcome!="timeout"}[5m])) by (le, instance))`, "{{instance}}", ""},
		{"metric name typo", `circuit_breaker_stat{gateway=~"$gateway"}`, "", "no metric circuit_breaker_stat"},
		{"histogram without its suffix", `rate(payrouter_gateway_request_duration_seconds{gateway=~"$gateway"}[5m])`, "", "no metric payrouter_gateway_request_duration_seconds"},
		{"label typo in a selector", `circuit_breaker_state{gatway=~"$gateway"}`, "", "has no label gatway"},
		{"label of another metric", `payrouter_hedges_total{gateway=~"$gateway"}`, "", "payrouter_hedges_total has no label gateway"},
		{"label typo in sum by", `sum by (gateway, opration) (circuit_breaker_state{gateway=~"$gateway"})`, "", "has no label opration"},
		{"label typo in a trailing by", `sum(rate(payrouter_charges_total{gateway=~"$gateway"}[5m])) by (stauts)`, "", "has no label stauts"},
		{"le on a counter", `sum by (le) (rate(payrouter_charges_total{gateway=~"$gateway"}[5m]))`, "", "has no label le"},
		{"label typo in on", `payrouter_bulkhead_in_flight{gateway=~"$gateway"} / on (gatway, instance) payrouter_bulkhead_capacity{gateway=~"$gateway"}`, "", "none of payrouter_bulkhead_in_flight, payrouter_bulkhead_capacity has label gatway"},
		{"no gateway filter", `payrouter_bulkhead_in_flight`, "", "not filtered by the gateway variable"},
		{"legend of an aggregated-away label", `sum by (gateway) (rate(payrouter_charges_total{gateway=~"$gateway"}[5m]))`, "{{status}}", "legend {{status}}"},
		{"unknown function", `rat(payrouter_charges_total{gateway=~"$gateway"}[5m])`, "", "unknown function rat()"},
		{"unbalanced parentheses", `sum(rate(payrouter_charges_total{gateway=~"$gateway"}[5m])`, "", "unbalanced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := checkPromQL(tc.expr, tc.legend, exported, true)
			switch {
			case tc.want == "" && len(problems) > 0:
				t.Errorf("%s: want no problem, got %q", tc.expr, problems)
			case tc.want != "" && !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }):
				t.Errorf("%s: want a problem saying %q, got %q", tc.expr, tc.want, problems)
			}
		})
	}
}

// TestAlertRulesUseExportedMetrics checks configs/prometheus/alerts.yml the same way: promtool's
// unit tests (scripts/check-alerts.sh) feed the rules the series they name, so only this test
// notices when those names are not what payrouter exports.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	exported := exportedSeries(t)
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			for _, p := range checkPromQL(r.Expr, "", exported, false) {
				t.Errorf("%s: %s", r.Alert, p)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: a summary and a description (what to do) are required", r.Alert)
			}
		}
	}
	for _, want := range []string{"PayrouterBreakerOpenTooLong", "PayrouterBulkheadSaturated", "PayrouterGatewayFailureRatioHigh", "PayrouterQueueGrowing", "PayrouterTaskNotQueued", "PayrouterDatabaseDown", "PayrouterStateStoreDown", "PayrouterStateStoreErrors", "PayrouterConfigReloadRefused", "PayrouterWebhookDeliveriesFailing", "PayrouterWebhookDeadLettered"} {
		if !slices.Contains(names, want) {
			t.Errorf("no alert %s in %s", want, alertsFile)
		}
	}
}

// TestBreakerOpenedTimestampSurvivesTrials: the alert PayrouterBreakerOpenTooLong relies on
// circuit_breaker_opened_timestamp_seconds keeping the time the breaker left closed while its
// half-open trials fail, and moving only once it has closed.
func TestBreakerOpenedTimestampSurvivesTrials(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMetrics()
		o := NewObserver(m, NewLogger(io.Discard, slog.LevelInfo))
		m.BreakerCooldown("paywell", payrouter.OpCharge, 4*time.Second)
		b := resilience.NewBreaker("paywell", payrouter.OpCharge, resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 1, Cooldown: 4 * time.Second}, HalfOpenRequests: 1}, o)
		call := func(outcome payrouter.Outcome) {
			t.Helper()
			done, err := b.Allow()
			if err != nil {
				t.Fatalf("Allow: %v (state %s)", err, b.State())
			}
			done(outcome)
		}
		opened := func() float64 { return testutil.ToFloat64(m.breakerInfo.opened.WithLabelValues("paywell", "charge")) }
		unix := func(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

		if got := testutil.ToFloat64(m.breakerInfo.cooldown.WithLabelValues("paywell", "charge")); got != 4 {
			t.Errorf("circuit_breaker_cooldown_seconds = %v, want 4", got)
		}
		tripped := time.Now()
		call(payrouter.OutcomeUnavailable) // closed -> open
		if got := opened(); got != unix(tripped) {
			t.Fatalf("after the trip: opened = %.3f, want %.3f", got, unix(tripped))
		}
		for range 3 { // open -> half_open -> open, a failed trial each cooldown
			time.Sleep(5 * time.Second)
			call(payrouter.OutcomeUnavailable)
			if b.State() != resilience.StateOpen {
				t.Fatalf("state %s after a failed trial, want open", b.State())
			}
			if got := opened(); got != unix(tripped) {
				t.Errorf("after a failed trial: opened = %.3f, want it kept at %.3f", got, unix(tripped))
			}
		}
		time.Sleep(5 * time.Second)
		call(payrouter.OutcomeSucceeded) // half_open -> closed
		if b.State() != resilience.StateClosed {
			t.Fatalf("state %s after a successful trial, want closed", b.State())
		}
		time.Sleep(time.Second)
		again := time.Now()
		call(payrouter.OutcomeUnavailable) // closed -> open: the clock restarts
		if got := opened(); got != unix(again) {
			t.Errorf("after closing and tripping again: opened = %.3f, want %.3f", got, unix(again))
		}
	})
}
