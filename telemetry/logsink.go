package telemetry

import (
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of a LogSink.
const (
	// DefaultLogQueueBytes bounds the lines a LogSink holds unwritten: about 4000 request lines.
	// Beyond it the destination is not keeping up, and holding more would only grow the heap.
	DefaultLogQueueBytes = 1 << 20
	// DefaultAuditWait is how long an audit line waits for room in a full queue before it is
	// dropped and counted: long enough for a destination that stalls for a moment (a log
	// shipper's hiccup) to lose nothing, short enough that a request whose audit line cannot be
	// written is not held past a storefront's own timeout.
	DefaultAuditWait = time.Second
)

// LogSink writes log lines to a destination (payrouter's stderr) from a goroutine of its own, so
// that no request waits for a write(2): a line is copied into a queue, and the writer sends
// everything queued in one write, a batch per wake-up. A line is in the destination within a
// write's time of being logged when the destination keeps up; under load the batches grow and
// the writes per line fall.
//
// The queue is bounded (its bytes). When it is full the destination is slower than the lines
// come: a line other than an audit line is then dropped and counted at once; an audit line
// waits up to its audit wait for room (docs/audit.md), and only then is dropped and counted. The
// counts are payrouter_log_lines_dropped_total, and after any drop the writer writes a
// log.lines_dropped line of its own saying how many of each kind were lost, so that the log
// itself shows the gap. Close writes every line queued before it returns (a clean shutdown
// loses nothing); lines logged after Close are written at once, on the caller's goroutine.
//
// Each Write must be one whole line (slog's handlers write one record per call).
type LogSink struct {
	w         io.Writer
	maxBytes  int
	auditWait time.Duration

	mu      sync.Mutex
	queue   []byte        // lines waiting for the writer
	spare   []byte        // the last batch's buffer, reused for the next queue
	drained chan struct{} // closed when the writer takes the queue: room for a waiting audit line
	closed  bool          // Close was called: the writer exits once the queue is empty
	direct  bool          // the writer has exited: lines are written by their callers
	wake    chan struct{} // one pending wake-up for the writer
	done    chan struct{} // closed when the writer has exited

	dropped, droppedAudit   atomic.Uint64 // lines dropped since start
	reported, reportedAudit uint64        // what the last log.lines_dropped line covered (writer only)
	closeOnce               sync.Once
	now                     func() time.Time
}

// LogSinkOptions change a LogSink's defaults; the zero value keeps them.
type LogSinkOptions struct {
	// QueueBytes bounds the bytes of lines waiting to be written; 0: DefaultLogQueueBytes.
	QueueBytes int
	// AuditWait is how long an audit line waits for room in a full queue; 0: DefaultAuditWait.
	AuditWait time.Duration
}

// NewLogSink starts a LogSink writing to w. Close it once nothing logs any more.
func NewLogSink(w io.Writer, o LogSinkOptions) *LogSink {
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultLogQueueBytes
	}
	if o.AuditWait <= 0 {
		o.AuditWait = DefaultAuditWait
	}
	s := &LogSink{
		w: w, maxBytes: o.QueueBytes, auditWait: o.AuditWait,
		drained: make(chan struct{}),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		now:     time.Now,
	}
	go s.run()
	return s
}

// Write queues one line that is not an audit line; when the queue is full it is dropped and
// counted. It never blocks on the destination and never fails.
func (s *LogSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	if s.direct {
		defer s.mu.Unlock()
		return s.w.Write(p)
	}
	if !s.roomFor(len(p)) {
		s.mu.Unlock()
		s.dropped.Add(1)
		return len(p), nil
	}
	s.enqueue(p)
	s.mu.Unlock()
	return len(p), nil
}

// Audit returns the writer of audit lines: like Write, but a line that finds the queue full
// waits up to the audit wait for the writer to make room before it is dropped and counted.
func (s *LogSink) Audit() io.Writer { return auditWriter{s} }

type auditWriter struct{ s *LogSink }

func (a auditWriter) Write(p []byte) (int, error) { return a.s.writeAudit(p) }

func (s *LogSink) writeAudit(p []byte) (int, error) {
	var timer *time.Timer
	s.mu.Lock()
	for {
		if s.direct {
			defer s.mu.Unlock()
			return s.w.Write(p)
		}
		if s.roomFor(len(p)) {
			s.enqueue(p)
			s.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return len(p), nil
		}
		drained := s.drained
		s.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(s.auditWait)
		}
		select {
		case <-drained:
		case <-timer.C:
			s.droppedAudit.Add(1)
			return len(p), nil
		}
		s.mu.Lock()
	}
}

// roomFor reports whether a line of n bytes fits the queue. A line alone in the queue always
// fits, whatever its size: otherwise it could never be written. s.mu held.
func (s *LogSink) roomFor(n int) bool {
	return len(s.queue) == 0 || len(s.queue)+n <= s.maxBytes
}

// enqueue appends a line and wakes the writer. s.mu held.
func (s *LogSink) enqueue(p []byte) {
	s.queue = append(s.queue, p...)
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is pending already: the writer will take this line with the others
	}
}

// run is the writer: it takes everything queued at each wake-up and writes it in one call.
func (s *LogSink) run() {
	defer close(s.done)
	for {
		<-s.wake
		s.mu.Lock()
		batch := s.queue
		s.queue, s.spare = s.spare[:0], nil
		close(s.drained)
		s.drained = make(chan struct{})
		s.mu.Unlock()

		if len(batch) > 0 {
			_, _ = s.w.Write(batch) // a destination that fails has nobody left to tell
		}
		s.reportDrops()

		s.mu.Lock()
		if s.spare == nil && cap(batch) <= 2*s.maxBytes {
			s.spare = batch[:0]
		}
		// Closed and nothing queued since the last batch: every line is out, and from now on
		// the callers write their own (under s.mu, so never beside a batch of ours).
		if s.closed && len(s.queue) == 0 {
			s.direct = true
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

// reportDrops writes a log.lines_dropped line when lines were dropped since the last one. It
// is written directly, never queued: it is the news that the queue overflowed. Writer only.
func (s *LogSink) reportDrops() {
	other, audit := s.dropped.Load(), s.droppedAudit.Load()
	if other == s.reported && audit == s.reportedAudit {
		return
	}
	line := make([]byte, 0, 320)
	line = append(line, `{"time":"`...)
	line = s.now().AppendFormat(line, time.RFC3339Nano)
	line = append(line, `","level":"WARN","msg":"log.lines_dropped","lines":`...)
	line = strconv.AppendUint(line, other-s.reported, 10)
	line = append(line, `,"audit_lines":`...)
	line = strconv.AppendUint(line, audit-s.reportedAudit, 10)
	line = append(line, `,"why":"the log's destination did not keep up: its queue was full (payrouter_log_lines_dropped_total counts every line lost)"}`+"\n"...)
	_, _ = s.w.Write(line)
	s.reported, s.reportedAudit = other, audit
}

// Dropped returns how many lines were dropped since the sink started: audit lines apart.
func (s *LogSink) Dropped() (other, audit uint64) {
	return s.dropped.Load(), s.droppedAudit.Load()
}

// Close writes every line queued, stops the writer and returns once both are done. Lines
// logged afterwards are written at once by their caller. Safe to call more than once.
func (s *LogSink) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
		<-s.done
	})
}

// logDrops exports the lines a LogSink dropped: payrouter_log_lines_dropped_total, by kind
// (audit, other), read from the sink at each scrape; both at 0 without a sink.
type logDrops struct {
	desc *prometheus.Desc
	sink atomic.Pointer[LogSink]
}

func newLogDrops() *logDrops {
	return &logDrops{desc: prometheus.NewDesc("payrouter_log_lines_dropped_total",
		"Log lines dropped because the log's destination did not keep up and its queue was full, by kind: audit (after waiting for room), other (at once).",
		[]string{"kind"}, nil)}
}

// Describe implements prometheus.Collector.
func (d *logDrops) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

// Collect implements prometheus.Collector.
func (d *logDrops) Collect(ch chan<- prometheus.Metric) {
	var other, audit uint64
	if s := d.sink.Load(); s != nil {
		other, audit = s.Dropped()
	}
	ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(audit), "audit")
	ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(other), "other")
}

// WatchLogSink exports what s dropped as payrouter_log_lines_dropped_total.
func (m *Metrics) WatchLogSink(s *LogSink) { m.logDrops.sink.Store(s) }
