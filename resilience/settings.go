package resilience

import (
	"time"

	"github.com/payrouter/payrouter"
)

// The settings of the three policies a gateway's calls go through: the timeout, the bulkhead and
// the breaker. Each type is also the schema of its keys under gateways.<name> in a configuration
// file (docs/configuration.md): package config embeds them as they are. Every default is written
// here once: a file that leaves a key out gets the default named below (config fills them in from
// DefaultTimeoutSettings, DefaultBulkheadSettings and DefaultBreakerSettings), and each field's
// zero value, in code or given explicitly in a file, means what its comment says.

// Defaults of the timeout and the bulkhead.
const (
	// DefaultTimeout bounds one gateway call (timeout).
	DefaultTimeout = 3 * time.Second
	// DefaultMaxConcurrent is a gateway's bulkhead slots (max_concurrent).
	DefaultMaxConcurrent = 20
)

// Defaults of the breaker (breaker.*).
const (
	// DefaultConsecutiveFailures is the trip rule of a breaker whose file names none of
	// consecutive_failures, failures_in_window and failure_rate. Naming any of them, even as 0,
	// means exactly the rules named: the zero value of each rule is off.
	DefaultConsecutiveFailures = 5
	// DefaultMinRequests is how many answered calls the window must hold before failure_rate
	// applies (min_requests), and what a MinRequests of 0 means.
	DefaultMinRequests = 20
	// DefaultWindow is the rolling window of the windowed rules (window).
	DefaultWindow = 30 * time.Second
	// DefaultCooldown is how long a breaker stays open before a trial (cooldown), and what a
	// Cooldown of 0 means.
	DefaultCooldown = 30 * time.Second
	// DefaultHalfOpenRequests is how many trial calls half-open admits (half_open_requests),
	// and what 0 means.
	DefaultHalfOpenRequests = 1
	// DefaultProbeInterval and DefaultProbeTimeout are an out-of-band prober's timings
	// (probe_interval, probe_timeout), and what 0 means.
	DefaultProbeInterval = 5 * time.Second
	DefaultProbeTimeout  = 2 * time.Second
)

// TimeoutSettings bound each of a gateway's calls (gateways.<name>.timeout and
// gateways.<name>.operations).
type TimeoutSettings struct {
	// Timeout bounds each call; 0: DefaultTimeout.
	Timeout time.Duration `yaml:"timeout"`
	// Operations overrides settings per operation (charge, capture, void, refund, status); an
	// operation missing here takes the gateway's.
	Operations map[payrouter.Operation]OperationSettings `yaml:"operations"`
}

// OperationSettings overrides a gateway's settings for one operation.
type OperationSettings struct {
	// Timeout bounds each call of the operation; 0: the gateway's Timeout.
	Timeout time.Duration `yaml:"timeout"`
}

// DefaultTimeoutSettings are the timeout settings of a file that gives none.
func DefaultTimeoutSettings() TimeoutSettings { return TimeoutSettings{Timeout: DefaultTimeout} }

// TimeoutFor returns the timeout of one operation: its own when set, else the gateway's.
func (s TimeoutSettings) TimeoutFor(op payrouter.Operation) time.Duration {
	if t := s.Operations[op].Timeout; t > 0 {
		return t
	}
	return s.Timeout
}

// BulkheadSettings size a gateway's bulkhead, shared by its operations (gateways.<name>.max_concurrent
// and max_wait).
type BulkheadSettings struct {
	// MaxConcurrent is how many calls may be in flight at once; 0: DefaultMaxConcurrent.
	MaxConcurrent int `yaml:"max_concurrent"`
	// MaxWait is the longest a call waits for a slot; 0: it does not wait (the default).
	MaxWait time.Duration `yaml:"max_wait"`
}

// DefaultBulkheadSettings are the bulkhead settings of a file that gives none.
func DefaultBulkheadSettings() BulkheadSettings {
	return BulkheadSettings{MaxConcurrent: DefaultMaxConcurrent}
}

// Probe says how a half-open breaker finds out whether its gateway recovered (breaker.probe).
type Probe string

// The probe modes.
const (
	// ProbeInBand: the trial calls of half-open are real customer calls. The zero Probe is
	// ProbeInBand.
	ProbeInBand Probe = "in_band"
	// ProbeOutOfBand leaves the trial to a Prober: in half-open no customer call is admitted,
	// and the prober's verdict on the gateway's health endpoint closes or reopens the breaker.
	ProbeOutOfBand Probe = "out_of_band"
)

// BreakerSettings are the rules of a gateway's breakers, one per operation
// (gateways.<name>.breaker): the trip rules, shared with the fleet's store, and how a tripped
// breaker tries the gateway again.
type BreakerSettings struct {
	payrouter.BreakerRules `yaml:",inline"`
	// HalfOpenRequests is how many trial calls half-open admits; all must succeed to close, any
	// failure opens it again. 0: DefaultHalfOpenRequests.
	HalfOpenRequests int `yaml:"half_open_requests"`
	// Probe chooses who makes the trial calls; "": ProbeInBand.
	Probe Probe `yaml:"probe"`
	// ProbeInterval is how often the Prober calls the gateway's health endpoint with
	// ProbeOutOfBand; 0: DefaultProbeInterval.
	ProbeInterval time.Duration `yaml:"probe_interval"`
	// ProbeTimeout bounds each probe; 0: DefaultProbeTimeout. It is cut to ProbeInterval: one
	// probe ends before the next.
	ProbeTimeout time.Duration `yaml:"probe_timeout"`
}

// DefaultBreakerSettings are the breaker settings of a file that gives none: trip after
// DefaultConsecutiveFailures failures in a row, stay open DefaultCooldown, one in-band trial.
func DefaultBreakerSettings() BreakerSettings {
	return BreakerSettings{
		BreakerRules: payrouter.BreakerRules{
			ConsecutiveFailures: DefaultConsecutiveFailures,
			MinRequests:         DefaultMinRequests,
			Window:              DefaultWindow,
			Cooldown:            DefaultCooldown,
		},
		HalfOpenRequests: DefaultHalfOpenRequests,
		Probe:            ProbeInBand,
		ProbeInterval:    DefaultProbeInterval,
		ProbeTimeout:     DefaultProbeTimeout,
	}
}

// OutOfBand reports whether the trial calls are the prober's (ProbeOutOfBand).
func (s BreakerSettings) OutOfBand() bool { return s.Probe == ProbeOutOfBand }

// withDefaults returns s with its zero values replaced by what they mean.
func (s BreakerSettings) withDefaults() BreakerSettings {
	if s.Cooldown <= 0 {
		s.Cooldown = DefaultCooldown
	}
	if s.HalfOpenRequests <= 0 {
		s.HalfOpenRequests = DefaultHalfOpenRequests
	}
	if s.MinRequests <= 0 {
		s.MinRequests = DefaultMinRequests
	}
	if s.Probe == "" {
		s.Probe = ProbeInBand
	}
	if s.ProbeInterval <= 0 {
		s.ProbeInterval = DefaultProbeInterval
	}
	if s.ProbeTimeout <= 0 {
		s.ProbeTimeout = DefaultProbeTimeout
	}
	s.ProbeTimeout = min(s.ProbeTimeout, s.ProbeInterval)
	return s
}

// machine is s without the prober's timings, which a breaker does not use: a change of them
// alone keeps the breakers and their counts.
func (s BreakerSettings) machine() BreakerSettings {
	s.ProbeInterval, s.ProbeTimeout = 0, 0
	return s
}
