package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// wrkConnections is the connection count of the wrk rows: a storefront's pool of keep-alive
// connections, more than the machine's CPUs, where a closed loop queues.
const wrkConnections = 20

// wrkSample is what one wrk run measured: it reports quantiles rather than every latency.
type wrkSample struct {
	requests   int
	elapsed    time.Duration
	p50, p99   time.Duration
	unexpected int // answers of another status than the target's, and socket errors
}

func (s wrkSample) rate() float64 { return float64(s.requests) / s.elapsed.Seconds() }

// wrkScript is the Lua of a wrk run: the target's POST with its headers, a fresh
// Idempotency-Key per request (the prefix given after --, a thread number, a counter), answers of
// another status counted, and one RESULT line for the test to read.
const wrkScript = `
wrk.method = "POST"
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end
local prefix, n
-- bad is a global, not a local: done reads it from each thread with thread:get.
function init(args)
  prefix = args[1] .. "-" .. tid .. "-"
  n, bad = 0, 0
end
function request()
  n = n + 1
  wrk.headers["Idempotency-Key"] = prefix .. n
  return wrk.format()
end
function response(status, headers, body)
  if status ~= want then bad = bad + 1 end
end
function done(summary, latency, requests)
  local unexpected = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  for _, t in ipairs(threads) do unexpected = unexpected + t:get("bad") end
  io.write(string.format("RESULT %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), unexpected))
end
`

// wrkRunner runs wrk against one target.
type wrkRunner struct {
	bin, script, url string
}

// newWrk writes target's script and returns its runner; ok false when wrk is not installed.
func newWrk(t *testing.T, target Target) (*wrkRunner, bool) {
	t.Helper()
	bin, err := exec.LookPath("wrk")
	if err != nil {
		return nil, false
	}
	var b strings.Builder
	fmt.Fprintf(&b, "want = %d\nwrk.body = %q\n", target.Want, target.Body)
	for k, vs := range target.Header {
		fmt.Fprintf(&b, "wrk.headers[%q] = %q\n", k, vs[0])
	}
	b.WriteString(wrkScript)
	script := filepath.Join(t.TempDir(), "wrk-"+target.Name+".lua")
	if err := os.WriteFile(script, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return &wrkRunner{bin: bin, script: script, url: target.URL}, true
}

// run drives the target with wrkConnections connections on 2 threads for d, rounded up to whole
// seconds: wrk takes no fractions.
func (w *wrkRunner) run(ctx context.Context, t *testing.T, d time.Duration) wrkSample {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	secs := strconv.Itoa(int((d+time.Second-1)/time.Second)) + "s"
	cmd := exec.CommandContext(ctx, w.bin, "-t2", "-c"+strconv.Itoa(wrkConnections), "-d"+secs, "--timeout", "10s",
		"-s", w.script, w.url, "--", keyPrefix+"wrk-"+strconv.FormatUint(keySeq.Add(1), 10))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("wrk: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 6 || f[0] != "RESULT" {
			continue
		}
		var n [5]int64
		for i := range n {
			if n[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
				t.Fatalf("wrk's RESULT line %q: %v", sc.Text(), err)
			}
		}
		return wrkSample{requests: int(n[0]), elapsed: time.Duration(n[1]) * time.Microsecond,
			p50: time.Duration(n[2]) * time.Microsecond, p99: time.Duration(n[3]) * time.Microsecond, unexpected: int(n[4])}
	}
	t.Fatalf("wrk printed no RESULT line:\n%s", out)
	return wrkSample{}
}

// wrkComparison is alternateWrk's measurements, each pair's in turn.
type wrkComparison struct{ base, subject []wrkSample }

// alternateWrk is Alternate with wrk: a warm-up of each, then pairs in the order base subject,
// subject base, ...
func alternateWrk(ctx context.Context, t *testing.T, base, subject *wrkRunner) wrkComparison {
	t.Helper()
	base.run(ctx, t, warmUp)
	subject.run(ctx, t, warmUp)
	var c wrkComparison
	for i := range pairs {
		if i%2 == 0 {
			c.base = append(c.base, base.run(ctx, t, roundTime))
			c.subject = append(c.subject, subject.run(ctx, t, roundTime))
		} else {
			c.subject = append(c.subject, subject.run(ctx, t, roundTime))
			c.base = append(c.base, base.run(ctx, t, roundTime))
		}
	}
	return c
}

// pooled sums the runs' requests and time, and takes their quantiles' medians (wrk reports
// no latencies to merge).
func pooled(runs []wrkSample) wrkSample {
	var s wrkSample
	var p50s, p99s []time.Duration
	for _, r := range runs {
		s.requests += r.requests
		s.elapsed += r.elapsed
		s.unexpected += r.unexpected
		p50s, p99s = append(p50s, r.p50), append(p99s, r.p99)
	}
	s.p50, s.p99 = median(p50s), median(p99s)
	return s
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	for i := range s { // a handful of values: insertion sort
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}

// printWrk prints a wrk comparison as table prints a Load's: pooled rows, ratios, each pair's.
func printWrk(t *testing.T, title, baseName, subjectName string, c wrkComparison) {
	w := t.Output()
	fmt.Fprintln(w)
	fmt.Fprintln(w, title)
	fmt.Fprintf(w, "each server warmed up %s, then %d alternating pairs of %s runs (whole seconds: wrk takes no fractions); p50 and p99 are the median of the runs'\n",
		warmUp, pairs, (roundTime+time.Second-1)/time.Second*time.Second)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "connections\tserver\trequests\treq/s\tp50\tp99")
	b, s := pooled(c.base), pooled(c.subject)
	for _, r := range []struct {
		name string
		s    wrkSample
	}{{baseName, b}, {subjectName, s}} {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%.0f\t%s\t%s\n", wrkConnections, r.name, r.s.requests, r.s.rate(), formatDuration(r.s.p50), formatDuration(r.s.p99))
	}
	fmt.Fprintf(tw, "%d\t%s / %s\t\t%.2fx\t%.2fx\t%.2fx\n", wrkConnections, subjectName, baseName, s.rate()/b.rate(), ratio(s.p50, b.p50), ratio(s.p99, b.p99))
	var rates, p99s []string
	for i := range c.base {
		rates = append(rates, fmt.Sprintf("%.2f", c.subject[i].rate()/c.base[i].rate()))
		p99s = append(p99s, fmt.Sprintf("%.2f", ratio(c.subject[i].p99, c.base[i].p99)))
	}
	fmt.Fprintf(tw, "%d\t  (each pair)\t\t%s\t\t%s\n", wrkConnections, strings.Join(rates, " "), strings.Join(p99s, " "))
	tw.Flush()
}
