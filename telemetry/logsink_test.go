package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// gatedWriter is a log destination that takes a write only when let through (open), the way a
// stalled pipe to a log shipper does; it keeps what it was given.
type gatedWriter struct {
	gate   chan struct{} // one receive per write; nil: writes pass at once
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	if w.gate != nil {
		<-w.gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.buf.Write(p)
}

func (w *gatedWriter) lines() []map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []map[string]any
	for l := range strings.Lines(w.buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			panic(fmt.Sprintf("not a JSON line: %q", l))
		}
		out = append(out, m)
	}
	return out
}

// TestLogSinkWritesEveryLineByClose: lines logged from many goroutines all reach the destination,
// whole and in batches, by the time Close returns; a line logged after Close is written at once.
func TestLogSinkWritesEveryLineByClose(t *testing.T) {
	w := &gatedWriter{}
	sink := NewLogSink(w, LogSinkOptions{})
	log := NewSinkLogger(sink, slog.LevelInfo, "")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 250 {
				if i%5 == 0 {
					log.Info(AuditMessage, "g", g, "i", i)
				} else {
					log.Info("http.request", "g", g, "i", i)
				}
			}
		})
	}
	wg.Wait()
	sink.Close()
	lines := w.lines()
	if len(lines) != 2000 {
		t.Fatalf("%d lines written by Close, want 2000", len(lines))
	}
	seen := map[string]bool{}
	for _, l := range lines {
		seen[fmt.Sprint(l["g"], "/", l["i"])] = true
	}
	if len(seen) != 2000 {
		t.Errorf("%d distinct lines of 2000", len(seen))
	}
	if other, audit := sink.Dropped(); other != 0 || audit != 0 {
		t.Errorf("dropped %d lines and %d audit lines; want none", other, audit)
	}
	log.Info("after.close")
	if got := w.lines(); len(got) != 2001 || got[2000]["msg"] != "after.close" {
		t.Errorf("a line logged after Close was not written at once")
	}
	sink.Close() // again: nothing happens
}

// TestLogSinkSlowDestination: while the destination takes nothing, the queue fills; then a line
// other than an audit line is dropped at once and counted, an audit line waits for room and is
// written if the destination recovers within the audit wait, or dropped and counted if not; and
// the log says how many were lost, once the destination takes lines again.
func TestLogSinkSlowDestination(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &gatedWriter{gate: make(chan struct{})}
		m := NewMetrics()
		sink := NewLogSink(w, LogSinkOptions{QueueBytes: 1000, AuditWait: time.Second})
		m.WatchLogSink(sink)
		log := NewSinkLogger(sink, slog.LevelInfo, "")

		log.Info("first") // taken by the writer, which now waits at the gate
		synctest.Wait()
		for i := range 100 { // about 60 bytes each: the queue holds some, the rest are dropped
			log.Info("line", "i", i)
		}
		other, _ := sink.Dropped()
		if other == 0 || other == 100 {
			t.Fatalf("%d of 100 lines dropped with a queue of 1000 bytes; want some, not all", other)
		}

		// An audit line finds the queue full and waits; the destination takes a batch within
		// the audit wait, and the line is written.
		written := make(chan struct{})
		go func() {
			log.Info(AuditMessage, "action", "charge", "n", 1)
			close(written)
		}()
		synctest.Wait()
		select {
		case <-written:
			t.Fatal("the audit line returned while the queue was full: it should wait for room")
		default:
		}
		time.Sleep(500 * time.Millisecond)
		w.gate <- struct{}{} // the first batch ("first") goes out; the queue is taken next
		w.gate <- struct{}{} // the queued lines go out
		<-written

		// Another one, while the destination stalls longer than the audit wait: dropped, counted.
		log.Info("fill")
		synctest.Wait()
		for i := range 100 {
			log.Info("line", "i", i)
		}
		start := time.Now()
		log.Info(AuditMessage, "action", "charge", "n", 2)
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("the audit line waited %v for room; want the audit wait, 1s", waited)
		}
		other, audit := sink.Dropped()
		if audit != 1 {
			t.Errorf("%d audit lines dropped, want 1", audit)
		}
		if got := droppedMetric(t, m, "audit"); got != 1 {
			t.Errorf(`payrouter_log_lines_dropped_total{kind="audit"} = %v, want 1`, got)
		}
		if got := droppedMetric(t, m, "other"); got != float64(other) {
			t.Errorf(`payrouter_log_lines_dropped_total{kind="other"} = %v, want %d`, got, other)
		}

		close(w.gate) // the destination recovers
		sink.Close()
		var audits []float64
		var reported, reportedAudit float64
		for _, l := range w.lines() {
			switch l["msg"] {
			case AuditMessage:
				audits = append(audits, l["n"].(float64))
			case "log.lines_dropped":
				if l["level"] != "WARN" {
					t.Errorf("log.lines_dropped at level %v, want WARN", l["level"])
				}
				reported += l["lines"].(float64)
				reportedAudit += l["audit_lines"].(float64)
			}
		}
		if len(audits) != 1 || audits[0] != 1 {
			t.Errorf("audit lines written: %v; want the one that found room in time, n=1", audits)
		}
		if reported != float64(other) || reportedAudit != 1 {
			t.Errorf("log.lines_dropped lines told of %v lines and %v audit lines; %d and 1 were dropped", reported, reportedAudit, other)
		}
	})
}

// TestLogSinkLongLine: a line longer than the whole queue is written, not dropped for ever.
func TestLogSinkLongLine(t *testing.T) {
	w := &gatedWriter{}
	sink := NewLogSink(w, LogSinkOptions{QueueBytes: 100})
	log := NewSinkLogger(sink, slog.LevelInfo, "")
	log.Info("long", "text", strings.Repeat("x", 500))
	sink.Close()
	if got := w.lines(); len(got) != 1 || got[0]["msg"] != "long" {
		t.Errorf("lines written: %v; want the long one", got)
	}
}

// TestSinkLoggerLevels: a sink logger keeps NewLogger's rules: lines below the level are not
// written, audit lines always are, with the trace ids of the context's span.
func TestSinkLoggerLevels(t *testing.T) {
	w := &gatedWriter{}
	sink := NewLogSink(w, LogSinkOptions{})
	log := NewSinkLogger(sink, slog.LevelError, "a")
	log.InfoContext(context.Background(), "quiet")
	log.Info(AuditMessage, "action", "charge")
	log.Error("loud")
	sink.Close()
	var msgs []string
	for _, l := range w.lines() {
		msgs = append(msgs, fmt.Sprint(l["msg"], "@", l["instance"]))
	}
	if got := strings.Join(msgs, " "); got != "audit@a loud@a" {
		t.Errorf("lines written: %s; want audit@a loud@a", got)
	}
}

// droppedMetric is payrouter_log_lines_dropped_total{kind} as m's registry exports it.
func droppedMetric(t *testing.T, m *Metrics, kind string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "payrouter_log_lines_dropped_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			if s.GetLabel()[0].GetValue() == kind {
				return s.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("payrouter_log_lines_dropped_total{kind=%q} not exported", kind)
	return 0
}

// TestInstanceIsLast: the instance's name ends every line, after the trace ids, so that a line
// reads as it did without it: its message, then its own fields in the order they were given.
func TestInstanceIsLast(t *testing.T) {
	var buf bytes.Buffer
	sink := NewLogSink(&buf, LogSinkOptions{})
	log := NewSinkLogger(sink, slog.LevelInfo, "host/serve/7").With("listener", "admin_listen")
	log.Warn("tls.handshake_failed", "err", "no certificate")
	log.Info(AuditMessage, "action", "reload")
	sink.Close()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %q", len(lines), buf.String())
	}
	for i, want := range []string{
		`"msg":"tls.handshake_failed","listener":"admin_listen","err":"no certificate","instance":"host/serve/7"}`,
		`"msg":"audit","listener":"admin_listen","action":"reload","instance":"host/serve/7"}`,
	} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("line %d: %s\nwant it to end %s", i+1, lines[i], want)
		}
	}
}
