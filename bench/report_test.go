package bench

import (
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// How long each measurement runs. Short, because the machine is shared and a long run only
// collects more of other jobs' noise; several alternating pairs instead of one long run, so that
// the noise shows as spread between the pairs' ratios.
const (
	warmUp    = time.Second
	roundTime = 1500 * time.Millisecond
	pairs     = 3
)

// concurrencies are the worker counts of every comparison: one (latency with no queueing, the
// path's own cost) and sixteen (a busy storefront: throughput, and latency under contention on
// a machine with few cores).
var concurrencies = []int{1, 16}

// table prints comparisons as aligned rows: for each concurrency the baseline, the subject, the
// subject/baseline ratios and, for each pair, the ratios it measured on its own.
type table struct {
	tw *tabwriter.Writer
	// withDifference adds a row of subject - baseline latencies: the time the subject adds.
	withDifference bool
}

func newTable(w io.Writer, title string, withDifference bool) *table {
	fmt.Fprintln(w)
	fmt.Fprintln(w, title)
	fmt.Fprintf(w, "each server warmed up %s, then %d alternating pairs of %s runs; closed loop over loopback, %d CPUs shared by load generator and servers\n",
		warmUp, pairs, roundTime, runtime.NumCPU())
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0), withDifference: withDifference}
	fmt.Fprintln(t.tw, "workers\tserver\trequests\treq/s\tp50\tp99")
	return t
}

// add prints one comparison's rows.
func (t *table) add(workers int, baseName, subjectName string, c Comparison) {
	b, s := Merge(c.Base...), Merge(c.Subject...)
	row := func(name string, m Sample) {
		fmt.Fprintf(t.tw, "%d\t%s\t%d\t%.0f\t%s\t%s\n", workers, name, m.Requests, m.Rate(),
			formatDuration(m.Quantile(0.50)), formatDuration(m.Quantile(0.99)))
	}
	row(baseName, b)
	row(subjectName, s)
	if t.withDifference {
		fmt.Fprintf(t.tw, "%d\t%s - %s\t\t\t%s\t%s\n", workers, subjectName, baseName,
			formatDifference(s.Quantile(0.50)-b.Quantile(0.50)), formatDifference(s.Quantile(0.99)-b.Quantile(0.99)))
	}
	fmt.Fprintf(t.tw, "%d\t%s / %s\t\t%.2fx\t%.2fx\t%.2fx\n", workers, subjectName, baseName,
		s.Rate()/b.Rate(), ratio(s.Quantile(0.50), b.Quantile(0.50)), ratio(s.Quantile(0.99), b.Quantile(0.99)))
	var rates, p50s []string
	for i := range c.Base {
		rates = append(rates, fmt.Sprintf("%.2f", c.Subject[i].Rate()/c.Base[i].Rate()))
		p50s = append(p50s, fmt.Sprintf("%.2f", ratio(c.Subject[i].Quantile(0.50), c.Base[i].Quantile(0.50))))
	}
	fmt.Fprintf(t.tw, "%d\t  (each pair)\t\t%s\t%s\n", workers, strings.Join(rates, " "), strings.Join(p50s, " "))
}

// flush writes the table out.
func (t *table) flush() { t.tw.Flush() }

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// formatDuration prints a latency with the precision that matters at its size.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// formatDifference is formatDuration with a sign.
func formatDifference(d time.Duration) string {
	if d < 0 {
		return "-" + formatDuration(-d)
	}
	return "+" + formatDuration(d)
}

// workersText is "1 worker" or "16 workers".
func workersText(n int) string {
	if n == 1 {
		return "1 worker"
	}
	return strconv.Itoa(n) + " workers"
}

// compareAt runs subject against base with workers each, A/B alternated (Alternate), and checks
// every sample of both (checkSamples): one row of a report's table.
func compareAt(t *testing.T, base, subject Target, workers int) Comparison {
	t.Helper()
	b, s := NewLoad(base, workers), NewLoad(subject, workers)
	c := Alternate(t.Context(), b, s, warmUp, roundTime, pairs)
	b.Close()
	s.Close()
	checkSamples(t, base, append(c.Base, c.WarmBase)...)
	checkSamples(t, subject, append(c.Subject, c.WarmSubject)...)
	return c
}
