package telemetry

import (
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

const metricsDoc = "../docs/metrics.md"

// metricDoc is one metric as docs/metrics.md or the registry has it.
type metricDoc struct {
	kind   string   // gauge, counter, histogram
	labels []string // sorted
}

// TestMetricsDoc: every metric payrouter exports is in docs/metrics.md with its type and labels,
// and every metric listed there is exported. The Go and process collectors' go_* and process_*
// are the client library's and are not listed one by one.
func TestMetricsDoc(t *testing.T) {
	exported := exportedMetrics(t)
	documented := readMetricsDoc(t)
	for _, name := range slices.Sorted(maps.Keys(exported)) {
		got := exported[name]
		doc, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("%s: %s (%s, labels %v) is exported but not documented", metricsDoc, name, got.kind, got.labels)
		case doc.kind != got.kind:
			t.Errorf("%s: %s is documented as a %s; it is a %s", metricsDoc, name, doc.kind, got.kind)
		case !slices.Equal(doc.labels, got.labels):
			t.Errorf("%s: %s is documented with labels %v; it has %v", metricsDoc, name, doc.labels, got.labels)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(documented)) {
		if _, ok := exported[name]; !ok {
			t.Errorf("%s: documents %s, which payrouter does not export", metricsDoc, name)
		}
	}
}

// exportedMetrics lists what a Metrics exports, with the in-memory store's metrics registered as
// serve registers them: every collector held by a field of Metrics (its descriptors, whether or
// not it has a series yet), and every family the registry gathers.
func exportedMetrics(t *testing.T) map[string]metricDoc {
	t.Helper()
	m := NewMetrics()
	m.WatchMemoryStore(idleMemoryStore{})
	out := map[string]metricDoc{}
	collectFields(t, reflect.ValueOf(m).Elem(), out)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		name := f.GetName()
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		var labels []string
		if len(f.GetMetric()) > 0 {
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		slices.Sort(labels)
		d := metricDoc{kind: strings.ToLower(f.GetType().String()), labels: labels}
		if d.kind == "untyped" {
			t.Errorf("%s is untyped", name)
		}
		if prev, ok := out[name]; ok && (prev.kind != d.kind || len(f.GetMetric()) > 0 && !slices.Equal(prev.labels, d.labels)) {
			t.Errorf("%s: its field says %v, the registry %v", name, prev, d)
		}
		out[name] = d
	}
	return out
}

var (
	descName   = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
)

// collectFields finds every collector among v's fields, unexported ones included, and records
// its metrics: their kind from the collector's type, their names and labels from its
// descriptors. A struct (or pointer to one) that is no known metric type is searched in turn.
func collectFields(t *testing.T, v reflect.Value, out map[string]metricDoc) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem() // readable, unexported or not
		if f.Kind() == reflect.Pointer && f.IsNil() {
			continue
		}
		var kind string
		switch f.Interface().(type) {
		case *prometheus.GaugeVec, prometheus.Gauge:
			kind = "gauge"
		case *prometheus.CounterVec, prometheus.Counter:
			kind = "counter"
		case *prometheus.HistogramVec, prometheus.Histogram:
			kind = "histogram"
		case *prometheus.Registry:
			continue
		default:
			if f.Kind() == reflect.Pointer && f.Elem().Kind() == reflect.Struct {
				collectFields(t, f.Elem(), out)
			}
			continue
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { f.Interface().(prometheus.Collector).Describe(ch); close(ch) }()
		for d := range ch {
			s := d.String()
			name, labels := descName.FindStringSubmatch(s), descLabels.FindStringSubmatch(s)
			if name == nil || labels == nil {
				t.Fatalf("cannot read the descriptor %s", s)
			}
			var ls []string
			if labels[1] != "" {
				ls = strings.Split(labels[1], ",")
			}
			slices.Sort(ls)
			out[name[1]] = metricDoc{kind: kind, labels: ls}
		}
	}
}

// readMetricsDoc reads the metric tables of docs/metrics.md: rows of name, type, labels (each
// in backticks, or "none") and meaning.
func readMetricsDoc(t *testing.T) map[string]metricDoc {
	t.Helper()
	data, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]metricDoc{}
	for _, line := range strings.Split(string(data), "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if !strings.HasPrefix(line, "| `") || len(cells) != 4 {
			continue // not a metric's row (the label values' table has two columns)
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		d := metricDoc{kind: strings.TrimSpace(cells[1])}
		if l := strings.TrimSpace(cells[2]); l != "none" {
			for _, label := range strings.Split(l, ",") {
				d.labels = append(d.labels, strings.Trim(strings.TrimSpace(label), "`"))
			}
		}
		slices.Sort(d.labels)
		if _, dup := out[name]; dup {
			t.Errorf("%s: %s is documented twice", metricsDoc, name)
		}
		out[name] = d
	}
	if len(out) == 0 {
		t.Fatalf("%s: no metric rows found", metricsDoc)
	}
	return out
}

// idleMemoryStore is an empty in-memory store, for listing the metrics it exports.
type idleMemoryStore struct{}

func (idleMemoryStore) ChargesLen() int         { return 0 }
func (idleMemoryStore) Evicted() int64          { return 0 }
func (idleMemoryStore) Bytes() int64            { return 0 }
func (idleMemoryStore) MaxBytesPerOwner() int64 { return 0 }
