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
	memoryMaxCharges     = 5_000
	memoryWorkers        = 8
	// chargeBytes is what one stored charge with the largest body the API accepts costs: 20
	// metadata pairs of 40 + 164 characters (4,096 bytes in all is the cap) and a 500-character
	// description, about 4.6 KB of text, counted at 8 KiB with its map and copies. recordBytes is one idempotency record of
	// a 402 (its body, headers, fingerprint and key), counted at 2 KiB.
	chargeBytes = 8 << 10
	recordBytes = 2 << 10
	// heapSlack is what the process holds besides the charges and records: its code's data,
	// pools, buffers of the connections in use, and what garbage collection leaves between
	// cycles (the heap may grow to twice the live data before a collection, GOGC=100).
	heapSlack = 48 << 20
)

// TestMemoryBoundedUnderDeclines is the finding "one key can exhaust memory": declined
// charges with the largest metadata the API accepts, sent over a few connections, against an
// instance whose money state is in memory with state.max_charges 5,000. The process's heap must
// stay under a bound derived from that maximum: what max_charges charges and the idempotency
// records of every charge sent (kept for their TTL) take, twice (the collector's headroom), plus
// a fixed slack; an unbounded store would take charges × 8 KiB instead. The store must hold at
// most max_charges charges, the oldest must be gone (404) and the newest still answer.
func TestMemoryBoundedUnderDeclines(t *testing.T) {
	skipIfShort(t)
	charges := memoryDefaultCharges
	if v := os.Getenv("MEMORY_CHARGES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < memoryMaxCharges {
			t.Fatalf("MEMORY_CHARGES=%q: want a number of charges >= %d", v, memoryMaxCharges)
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
		return strings.Replace(yaml, "state:\n", fmt.Sprintf("state:\n  max_charges: %d\n", memoryMaxCharges), 1)
	})
	base := heapInuse(t, pr)

	body := largestDecline(t)
	var next, declined atomic.Int64
	var firstID, lastID atomic.Value
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
				if err != nil || r.status != 402 || a.Type != "/problems/card-declined" {
					errs <- fmt.Errorf("charge %d: want 402 card-declined, got %s", i, r)
					return
				}
				declined.Add(1)
				if i == 1 {
					firstID.Store(a.ChargeID)
				}
				if i == int64(charges) {
					lastID.Store(a.ChargeID)
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
	evicted, _ := sc.value("payrouter_memstore_evictions_total")
	hwm := peakRSS(t, pr.proc.cmd.Process.Pid)
	bound := base + 2*(memoryMaxCharges*chargeBytes+int64(charges)*recordBytes) + heapSlack
	unbounded := int64(charges) * chargeBytes
	t.Logf("%d declined charges in %v (%.0f/s): heap in use %d MiB at start, %d MiB at its peak, %d MiB at the end; peak RSS %d MiB; bound %d MiB (an unbounded store: over %d MiB of charges alone); the store holds %.0f charges, evicted %.0f",
		declined.Load(), took.Round(time.Millisecond), float64(declined.Load())/took.Seconds(),
		base>>20, peak.Load()>>20, int64(end)>>20, hwm>>20, bound>>20, unbounded>>20, held, evicted)

	if p := max(peak.Load(), int64(end)); p > bound {
		t.Errorf("heap in use reached %d MiB, over its bound of %d MiB for state.max_charges %d", p>>20, bound>>20, memoryMaxCharges)
	}
	if hwm > bound+64<<20 { // RSS adds the runtime's own memory and pages not yet returned
		t.Errorf("peak RSS %d MiB, over the heap bound %d MiB + 64 MiB", hwm>>20, bound>>20)
	}
	if held > memoryMaxCharges || held == 0 {
		t.Errorf("payrouter_memstore_charges = %.0f, want 1 .. %d", held, memoryMaxCharges)
	}
	if want := float64(charges - memoryMaxCharges); evicted < want {
		t.Errorf("payrouter_memstore_evictions_total = %.0f, want at least %.0f", evicted, want)
	}
	// What a user sees: the oldest charge is gone, the newest is there, still declined.
	if r, err := send(pr.client, "GET", pr.url+"/charge/"+firstID.Load().(string), nil, "Authorization", "Bearer "+apiKey); err != nil || r.status != 404 {
		t.Errorf("the first charge, long evicted: want 404, got %v %v", r, err)
	}
	if a, err := pr.getCharge(lastID.Load().(string)); err != nil || a.ChargeStatus != "declined" {
		t.Errorf("the last charge: want 200 declined, got %+v %v", a, err)
	}
}

// largestDecline is a declined charge's body with the largest metadata and description the API
// accepts: 20 pairs of a 40-character key and a 164-character value, 4,080 of the 4,096 bytes
// metadata may hold. Letters only: a run of digits could look like a card number.
func largestDecline(t *testing.T) []byte {
	t.Helper()
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
		t.Fatal(err)
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
