package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const limitsBase = `
auth: {api_keys: [k1, k2]}
gateways:
  a: {kind: paywell, base_url: "https://pay.example"}
`

func TestLimitsGiven(t *testing.T) {
	c := mustParse(t, limitsBase+`
limits: {requests_per_second: 0, key_share: 1, auth_failures_per_minute: 0}
state: {retention: 720h, max_memory: 0}
`)
	want := Limits{RequestsPerSecond: 0, Burst: 0, KeyShare: 1, AuthFailuresPerMinute: 0}
	if c.Limits != want {
		t.Errorf("limits = %+v, want %+v (0 given means off, not the default)", c.Limits, want)
	}
	if c.State.Retention != 720*time.Hour || c.State.MaxMemory != 0 || c.MemoryPerKey() != 0 {
		t.Errorf("state = %+v, want retention 720h and max_memory 0 (no bound)", c.State)
	}
}

// state.max_memory is split equally among the API key scopes that may write: keys sharing a
// name count once, a read-only key not at all.
func TestMemoryPerKey(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       int64
	}{
		{"default, two keys", limitsBase, 256 << 20},
		{"units", limitsBase + "state: {max_memory: 1GiB}\n", 512 << 20},
		{"powers of 1000", limitsBase + "state: {max_memory: 100MB}\n", 50_000_000},
		{"plain bytes", limitsBase + "state: {max_memory: 4194304}\n", 2 << 20},
		{"a rotation counts once, a read-only key not at all", `
auth:
  api_keys:
    - {name: shop, key: k1}
    - {name: shop, key: k2}
    - {name: report, key: k3, rights: [read]}
gateways:
  a: {kind: paywell, base_url: "https://pay.example"}
state: {max_memory: 64MiB}
`, 64 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustParse(t, tc.yaml).MemoryPerKey(); got != tc.want {
				t.Errorf("MemoryPerKey = %d, want %d", got, tc.want)
			}
		})
	}
}

// A file still giving state.max_charges, the count bound max_memory replaced, is refused with
// what to write instead, not run with no bound or a guessed one.
func TestMaxChargesRemoved(t *testing.T) {
	problems := problemsOf(t, limitsBase+"state: {max_charges: 5000}\n")
	if !slices.ContainsFunc(problems, func(p string) bool {
		return strings.Contains(p, `state: "max_charges" is no longer a setting`) && strings.Contains(p, "state.max_memory")
	}) {
		t.Errorf("problems %q, want one saying max_charges is replaced by state.max_memory", problems)
	}
}

// A rate given alone gets a burst of twice its rate, not the default rate's burst.
func TestLimitsBurstFollowsRate(t *testing.T) {
	c := mustParse(t, limitsBase+"limits: {requests_per_second: 5}\n")
	if c.Limits.Burst != 10 {
		t.Errorf("burst = %d, want 10", c.Limits.Burst)
	}
}

func TestLimitsProblems(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"negative rate", "limits: {requests_per_second: -1}", "limits.requests_per_second: must be >= 0"},
		{"negative burst", "limits: {burst: -1}", "limits.burst: must be >= 0"},
		{"share 0", "limits: {key_share: 0}", "limits.key_share: must be in (0, 1]"},
		{"share above 1", "limits: {key_share: 1.5}", "limits.key_share: must be in (0, 1]"},
		{"negative auth failures", "limits: {auth_failures_per_minute: -3}", "limits.auth_failures_per_minute: must be >= 0"},
		{"retention 0", "state: {retention: 0s}", "state.retention: must be > 0"},
		{"retention under the idempotency ttl", "state: {retention: 1h}", "state.retention: must be at least idempotency.ttl (24h0m0s)"},
		{"negative max memory", "state: {max_memory: -1}", "line 5: state.max_memory: want a size in bytes"},
		{"max memory not a size", "state: {max_memory: lots}", "line 5: state.max_memory: want a size in bytes"},
		{"max memory under 1MiB a key", "state: {max_memory: 1MiB}", "state.max_memory: 1MiB shared by 2 API keys is 512KiB each, under the 1MiB a key needs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := problemsOf(t, limitsBase+tc.yaml+"\n")
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, tc.want) }) {
				t.Errorf("problems %q, want one starting %q", problems, tc.want)
			}
		})
	}
}

func TestKeyShareFor(t *testing.T) {
	c := mustParse(t, limitsBase+"limits: {key_share: 0.25}\n")
	if got := c.KeyShareFor(); got != 0.25 {
		t.Errorf("two keys: share %v, want 0.25", got)
	}
	c.Auth.APIKeys = c.Auth.APIKeys[:1]
	if got := c.KeyShareFor(); got != 1 {
		t.Errorf("one key: share %v, want 1 (nobody to leave room for)", got)
	}
}

func TestDiffLimits(t *testing.T) {
	a := mustParse(t, limitsBase)
	b := mustParse(t, limitsBase+"limits: {requests_per_second: 50}\n")
	ch := Diff(a, b)
	if !ch.Limits || ch.None() || len(ch.RestartNeeded) != 0 {
		t.Errorf("Diff = %+v, want limits_changed and nothing waiting for a restart", ch)
	}
	if got := Reloadable(a, b).Limits.RequestsPerSecond; got != 50 {
		t.Errorf("Reloadable keeps rate %v, want the file's 50: limits apply on reload", got)
	}
}
