package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Target is the request a Load sends over and over.
type Target struct {
	// Name labels the target in reports.
	Name string
	// URL is where every request is POSTed, unless URLs are given.
	URL string
	// URLs, when not nil, hands out the URL of each request instead of URL, each one once,
	// across every Load of the target: a load of refunds, each of a charge of its own. A worker
	// that finds none left stops, and the run ends when every worker has.
	URLs *URLs
	// Header is sent with every request. Idempotency-Key is added, fresh for each request unless
	// Keys are given.
	Header http.Header
	// Keys, when not empty, are the Idempotency-Keys to send instead of fresh ones, in turn over
	// the Load's workers (the first request sends Keys[0], the next Keys[1], ..., then Keys[0]
	// again): a load of replays, when each key has been answered already.
	Keys []string
	// Body is sent with every request.
	Body []byte
	// Want is the status every answer must have; any other is counted as Unexpected.
	Want int
}

// URLs are URLs handed out one at a time, each once, to the Loads of a Target. Safe for concurrent
// use.
type URLs struct {
	urls []string
	next atomic.Int64
}

// NewURLs returns URLs handing out urls in order.
func NewURLs(urls []string) *URLs { return &URLs{urls: urls} }

// take returns the next URL, or false when every one has been handed out.
func (u *URLs) take() (string, bool) {
	i := u.next.Add(1) - 1
	if i >= int64(len(u.urls)) {
		return "", false
	}
	return u.urls[i], true
}

// Left is how many URLs have not been handed out yet.
func (u *URLs) Left() int { return max(0, len(u.urls)-int(u.next.Load())) }

// errNoURL is once's answer when the target's URLs are all handed out: nothing was sent.
var errNoURL = errors.New("every URL of the target has been sent")

// requestTimeout bounds one request of a Load. Nothing measured here should come near it: it only
// keeps a wedged server from hanging the run.
const requestTimeout = 10 * time.Second

// keyPrefix and keySeq make every Idempotency-Key of the process unique: a repeated key would be
// answered from payrouter's idempotency store, without the work being measured.
var (
	keyPrefix = "bench-" + rand.Text()[:10] + "-"
	keySeq    atomic.Uint64
)

// Load is a closed-loop load generator: Workers goroutines, each sending its next request as soon
// as it has read the previous answer, over kept-alive connections. Closed loop means the offered
// load adapts to the server, so the rate it reaches is the server's throughput at that
// concurrency, and latencies include the queueing that concurrency causes.
type Load struct {
	target  Target
	workers int
	client  *http.Client
	// sent counts the requests started, to take the next of target.Keys.
	sent atomic.Uint64
}

// NewLoad returns a Load of workers concurrent workers on t, with its own connection pool so that
// two Loads never share (or steal) each other's warm connections.
func NewLoad(t Target, workers int) *Load {
	if workers < 1 {
		workers = 1
	}
	tr := &http.Transport{
		// Loopback only: an HTTP_PROXY in the environment must not put a proxy in the measurement.
		Proxy:       nil,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		// One idle connection per worker, or the default of 2 would redial under load and the
		// measurement would be of TCP handshakes.
		MaxIdleConns:        workers,
		MaxIdleConnsPerHost: workers,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	return &Load{target: t, workers: workers, client: &http.Client{Transport: tr, Timeout: requestTimeout}}
}

// Close drops the Load's idle connections.
func (l *Load) Close() { l.client.CloseIdleConnections() }

// Run drives the target for about d (each worker finishes the request it has started) or until
// ctx ends, and returns what it measured.
func (l *Load) Run(ctx context.Context, d time.Duration) Sample {
	type workerResult struct {
		lat        []time.Duration
		unexpected int
		errs       int
		firstBad   string
	}
	results := make([]workerResult, l.workers)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := range l.workers {
		wg.Go(func() {
			r := &results[w]
			// Sized for a fast loopback server, so that appending rarely grows the slice while
			// the clock is running.
			r.lat = make([]time.Duration, 0, 4096)
			for now := time.Now(); now.Before(deadline) && ctx.Err() == nil; {
				status, answer, err := l.once(ctx)
				if errors.Is(err, errNoURL) {
					break
				}
				end := time.Now()
				r.lat = append(r.lat, end.Sub(now))
				switch {
				case err != nil:
					r.errs++
					if r.firstBad == "" {
						r.firstBad = err.Error()
					}
				case status != l.target.Want:
					r.unexpected++
					if r.firstBad == "" {
						r.firstBad = fmt.Sprintf("status %d, want %d: %s", status, l.target.Want, answer)
					}
				}
				now = end
			}
		})
	}
	wg.Wait()
	s := Sample{Elapsed: time.Since(start)}
	for _, r := range results {
		s.Latencies = append(s.Latencies, r.lat...)
		s.Unexpected += r.unexpected
		s.Errors += r.errs
		if s.FirstProblem == "" {
			s.FirstProblem = r.firstBad
		}
	}
	s.Requests = len(s.Latencies)
	slices.Sort(s.Latencies)
	return s
}

// once sends one request with a fresh Idempotency-Key (or the next of the target's Keys) to the
// target's URL (or the next of its URLs; errNoURL, and nothing sent, when none is left) and reads
// the whole answer, so that the connection goes back to the pool and the time covers the full
// response. An answer of another status than the target's is returned (its first 300 bytes) for
// the report; the expected ones are read and dropped.
func (l *Load) once(ctx context.Context) (status int, unexpected string, err error) {
	url := l.target.URL
	if l.target.URLs != nil {
		var ok bool
		if url, ok = l.target.URLs.take(); !ok {
			return 0, "", errNoURL
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(l.target.Body))
	if err != nil {
		return 0, "", err
	}
	h := make(http.Header, len(l.target.Header)+1)
	for k, v := range l.target.Header {
		h[k] = v // shared, never modified
	}
	if keys := l.target.Keys; len(keys) > 0 {
		h["Idempotency-Key"] = []string{keys[(l.sent.Add(1)-1)%uint64(len(keys))]}
	} else {
		h["Idempotency-Key"] = []string{keyPrefix + strconv.FormatUint(keySeq.Add(1), 10)}
	}
	req.Header = h
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != l.target.Want {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		unexpected = string(b)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, unexpected, err
}

// Sample is what one or more runs of a Load measured.
type Sample struct {
	// Requests is the number of requests completed (well or not).
	Requests int
	// Elapsed is the wall time the run took.
	Elapsed time.Duration
	// Latencies holds every request's time, sorted.
	Latencies []time.Duration
	// Unexpected counts answers whose status was not the Target's Want; Errors, requests that
	// got no answer.
	Unexpected, Errors int
	// FirstProblem describes the first unexpected answer or error, for the failure message.
	FirstProblem string
}

// Merge pools samples of the same Load: requests and time add up, latencies are pooled.
func Merge(samples ...Sample) Sample {
	var m Sample
	for _, s := range samples {
		m.Requests += s.Requests
		m.Elapsed += s.Elapsed
		m.Latencies = append(m.Latencies, s.Latencies...)
		m.Unexpected += s.Unexpected
		m.Errors += s.Errors
		if m.FirstProblem == "" {
			m.FirstProblem = s.FirstProblem
		}
	}
	slices.Sort(m.Latencies)
	return m
}

// Rate is the completed requests per second.
func (s Sample) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Requests) / s.Elapsed.Seconds()
}

// Quantile is the q-quantile of the latencies (q in [0, 1]) by the nearest-rank method: the
// smallest latency that at least q of the requests did not exceed. 0 without latencies.
func (s Sample) Quantile(q float64) time.Duration {
	n := len(s.Latencies)
	if n == 0 {
		return 0
	}
	// The small subtraction keeps an exact rank exact: 0.99*100 is 99.00000000000001 in floating
	// point, and its ceiling would be the maximum rather than the 99th value.
	rank := int(math.Ceil(q*float64(n) - 1e-9))
	return s.Latencies[min(max(rank, 1), n)-1]
}

// Comparison is what Alternate measured of a baseline and a subject.
type Comparison struct {
	// WarmBase and WarmSubject are the warm-up runs: not measured, but their requests reached the
	// servers all the same.
	WarmBase, WarmSubject Sample
	// Base and Subject are the measured runs, in run order; Base[i] and Subject[i] are a pair.
	Base, Subject []Sample
}

// Runner is a load Alternate can run: a Load, or several run together (fleet_test.go).
type Runner interface {
	// Run drives the load for about d or until ctx ends and returns what it measured.
	Run(ctx context.Context, d time.Duration) Sample
}

// Alternate measures a baseline and a subject in turn after warming both up: each is first run
// for warm (not measured: connections, caches, the servers' heaps and the CPU's clock settle),
// then pairs times each for each, in the order base subject, subject base, base subject, ... so
// that a drift of the machine during the run (another job starting, a CPU clocking down) falls on
// both alike rather than on whichever ran last.
func Alternate(ctx context.Context, base, subject Runner, warm, each time.Duration, pairs int) Comparison {
	c := Comparison{WarmBase: base.Run(ctx, warm), WarmSubject: subject.Run(ctx, warm)}
	for i := range pairs {
		if i%2 == 0 {
			c.Base = append(c.Base, base.Run(ctx, each))
			c.Subject = append(c.Subject, subject.Run(ctx, each))
		} else {
			c.Subject = append(c.Subject, subject.Run(ctx, each))
			c.Base = append(c.Base, base.Run(ctx, each))
		}
	}
	return c
}
