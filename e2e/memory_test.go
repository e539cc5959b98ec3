package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Sizes of the memory test: the 50,000 declined charges, about 30 s on two cores;
// MEMORY_CHARGES overrides it (`MEMORY_CHARGES=200000 go test -run TestMemoryBounded ./e2e/`).
const (
	memoryDefaultCharges = 50_000
	// memoryMaxMemory is state.max_memory: 32 MiB for each of the harness's two API keys.
	memoryMaxMemory = 64 << 20
	memoryShare     = memoryMaxMemory / 2
	memoryWorkers   = 8
	// heapSlack is what the process holds besides its money state: its code's data, pools,
	// buffers of the connections in use.
	heapSlack = 48 << 20
	// shareSlack is how far a key's count may pass its share: the answers of the requests it
	// has under way, stored whatever its count (docs/limits.md, Memory).
	shareSlack = 64 << 10
)

// TestMemoryBoundedUnderDeclines is the finding "one key can exhaust memory": declined
// charges with the largest metadata the API accepts, sent over a few connections by one key,
// against an instance whose money state is in memory with state.max_memory 64 MiB. Each
// decline leaves its charge (which may go to make room) and its Idempotency-Key's answer (kept
// for 24 h), so the key fills its 32 MiB share and is then answered 503 state-unavailable
// naming state.max_memory. The store must count no more than the share, the process's heap
// must stay under twice max_memory (the collector's headroom) and a fixed slack, the oldest
// decline must be gone (404) and the newest still answer. An unbounded store would hold every
// charge and key: charges × 13 KiB.
func TestMemoryBoundedUnderDeclines(t *testing.T) {
	skipIfShort(t)
	charges := memoryDefaultCharges
	if v := os.Getenv("MEMORY_CHARGES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10_000 {
			t.Fatalf("MEMORY_CHARGES=%q: want a number of charges >= 10000", v)
		}
		charges = n
	}
	gw := gatewayConfig{Timeout: 2 * time.Second, MaxConcurrent: 32, ConsecutiveFailures: 5, Cooldown: 30 * time.Second}
	s := startSims(t)
	pr := startPayrouterEdited(t, s, routerConfig{
		RequestTimeout: 5 * time.Second,
		Gateways:       map[string]gatewayConfig{"paywell": gw},
		Routes:         []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell"}}},
	}, func(yaml string) string {
		// One key sends as fast as it can: the harness turns the rate limit off, so that
		// memory alone is measured.
		return strings.Replace(yaml, "state:\n", fmt.Sprintf("state:\n  max_memory: %d\n", memoryMaxMemory), 1)
	})
	base := heapInuse(t, pr)

	body := largestDeclineBody()
	var next, declined, refused atomic.Int64
	var firstID atomic.Value
	var lastMu sync.Mutex
	lastI, lastID := int64(0), ""
	var peak atomic.Int64
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() { // the heap at its largest, not only at the end
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if sc, err := pr.metrics(); err == nil {
				if v, ok := sc.value("go_memstats_heap_inuse_bytes"); ok && int64(v) > peak.Load() {
					peak.Store(int64(v))
				}
			}
		}
	})
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, memoryWorkers)
	for range memoryWorkers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(charges) {
					return
				}
				r, err := pr.chargeKeyed(fmt.Sprintf("mem-%d", i), body)
				if err != nil {
					errs <- err
					return
				}
				a, err := decodeAnswer(r)
				switch {
				case err == nil && r.status == 402 && a.Type == "/problems/card-declined":
					declined.Add(1)
					if i == 1 {
						firstID.Store(a.ChargeID)
					}
					lastMu.Lock()
					if i > lastI {
						lastI, lastID = i, a.ChargeID
					}
					lastMu.Unlock()
				case err == nil && r.status == 503 && a.Type == "/problems/state-unavailable" && strings.Contains(string(r.body), "state.max_memory"):
					refused.Add(1)
				default:
					errs <- fmt.Errorf("charge %d: want 402 card-declined, or 503 state-unavailable naming state.max_memory; got %s", i, r)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	watch.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	took := time.Since(start)

	sc, err := pr.metrics()
	if err != nil {
		t.Fatal(err)
	}
	end, _ := sc.value("go_memstats_heap_inuse_bytes")
	held, _ := sc.value("payrouter_memstore_charges")
	counted, _ := sc.value("payrouter_memstore_bytes")
	evicted, _ := sc.value("payrouter_memstore_evictions_total")
	limited, _ := sc.value("payrouter_rate_limited_total", "reason", "key_memory")
	hwm := peakRSS(t, pr.proc.cmd.Process.Pid)
	bound := base + 2*memoryMaxMemory + heapSlack
	t.Logf("%d charges in %v (%.0f/s): %d declined, %d refused 503; heap in use %d MiB at start, %d MiB at its peak, %d MiB at the end; peak RSS %d MiB; bound %d MiB; the store counts %.1f MiB (the key's share %d MiB), holds %.0f charges, evicted %.0f",
		charges, took.Round(time.Millisecond), float64(charges)/took.Seconds(), declined.Load(), refused.Load(),
		base>>20, peak.Load()>>20, int64(end)>>20, hwm>>20, bound>>20, counted/(1<<20), memoryShare>>20, held, evicted)

	if p := max(peak.Load(), int64(end)); p > bound {
		t.Errorf("heap in use reached %d MiB, over its bound of %d MiB for state.max_memory %d MiB", p>>20, bound>>20, memoryMaxMemory>>20)
	}
	if hwm > bound+64<<20 { // RSS adds the runtime's own memory and pages not yet returned
		t.Errorf("peak RSS %d MiB, over the heap bound %d MiB + 64 MiB", hwm>>20, bound>>20)
	}
	if counted > memoryShare+shareSlack {
		t.Errorf("payrouter_memstore_bytes = %.0f, over the one key's share of %d", counted, memoryShare)
	}
	if evicted == 0 || declined.Load() == 0 || refused.Load() == 0 || limited != float64(refused.Load()) {
		t.Errorf("%.0f evicted, %d declined, %d refused, %.0f counted as key_memory: want some of each, every refusal counted",
			evicted, declined.Load(), refused.Load(), limited)
	}
	// What a user sees: the oldest charge is gone; the keys' answers, which are promises, are
	// all kept: the first and the newest declined charge's keys replay their 402.
	if r, err := send(pr.client, "GET", pr.url+"/charge/"+firstID.Load().(string), nil, "Authorization", "Bearer "+apiKey); err != nil || r.status != 404 {
		t.Errorf("the first charge, long evicted: want 404, got %v %v", r, err)
	}
	for _, i := range []int64{1, lastI} {
		r, err := pr.chargeKeyed(fmt.Sprintf("mem-%d", i), body)
		if a, _ := decodeAnswer(r); err != nil || r.status != 402 || r.header.Get("Idempotent-Replayed") != "true" || a.ChargeID == "" {
			t.Errorf("charge %d's key again: want its 402 replayed, got %v %v", i, r, err)
		}
	}
	if lastID == "" {
		t.Error("no charge was declined")
	}
}

// largestDeclineBody is a declined charge's body with the largest metadata and description the
// API accepts: 20 pairs of a 40-character key and a 164-character value, 4,080 of the 4,096
// bytes metadata may hold. Letters only: a run of digits could look like a card number.
func largestDeclineBody() []byte {
	md := map[string]string{}
	for i := range 20 {
		key := fmt.Sprintf("key%c", 'a'+i) + strings.Repeat("k", 36)
		md[key] = strings.Repeat(string(rune('a'+i)), 164)
	}
	b, err := json.Marshal(map[string]any{
		"amount": 1999, "currency": "USD", "description": strings.Repeat("d", 500),
		"payment_method": map[string]string{"type": "card", "token": "tok_decline"},
		"metadata":       md,
	})
	if err != nil {
		panic(err)
	}
	return b
}

func heapInuse(t *testing.T, in *instance) int64 {
	t.Helper()
	sc, err := in.metrics()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := sc.value("go_memstats_heap_inuse_bytes")
	if !ok {
		t.Fatal("no go_memstats_heap_inuse_bytes on /metrics")
	}
	return int64(v)
}

// peakRSS is the process's resident set at its largest (VmHWM of /proc/<pid>/status), 0 where
// there is no /proc.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Logf("no peak RSS: %v", err)
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
