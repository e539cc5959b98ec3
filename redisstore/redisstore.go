// Package redisstore is the fleet's coordination state in Redis (docs/architecture.md, State
// stores): the breakers' rolling windows and states, forced states, the breaker events every
// instance hears by pub/sub, and leases that elect one prober or reconciler. It holds only what can
// be lost: losing all of it (a restart without persistence, a failover that drops acknowledged
// writes, a FLUSHALL) costs a few extra gateway calls while the breakers re-learn, never money.
// Money state (charges, refunds, idempotency records, the task queue) is never kept here: it lives
// in memstore or in PostgreSQL (pgstore), and Store does not implement payrouter.Store.
//
// It runs on go-redis's UniversalClient, so a single server, Sentinel and Cluster all work:
// every key of one breaker or lease carries a {hash tag}, so that the scripts that touch
// several keys at once stay on one Cluster slot.
//
// Every call is bounded by Options.Timeout and never retried by the client: a slow Redis must
// cost a caller at most that long, and the caller (statestore) decides what to do instead.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payrouter/payrouter"
)

// DefaultTimeout bounds each Redis call when Options.Timeout is 0. Redis answers in well under a
// millisecond on a healthy network; a call that takes longer than this is treated as a failure
// so that no request waits on a struggling Redis.
const DefaultTimeout = 100 * time.Millisecond

// DefaultPrefix starts every key payrouter writes, so that it can share a Redis with others.
const DefaultPrefix = "payrouter:"

// Options configures a Store. Every field's zero value is documented.
type Options struct {
	// Timeout bounds every Redis call (dial, write, read); 0: DefaultTimeout.
	Timeout time.Duration
	// Prefix starts every key and channel name; "": DefaultPrefix.
	Prefix string
	// PoolSize is the client's connection pool size; 0: go-redis's default (10 per CPU).
	PoolSize int
	// Log receives go-redis's own messages, as "redis.client" lines with any password of the
	// URL masked; nil leaves go-redis's default, plain text on stderr. go-redis has one logger per
	// process, so the last Open given a Log sets it.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	return o
}

// Store is the fleet's coordination state in Redis. It implements payrouter.FleetBreakers and
// payrouter.Leases (and not payrouter.Store: no money state is ever
// kept in Redis), and is safe for concurrent use.
type Store struct {
	rdb  redis.UniversalClient
	opts Options
}

var (
	_ payrouter.FleetBreakers = (*Store)(nil)
	_ payrouter.Leases        = (*Store)(nil)
)

// Open connects to the Redis that rawURL names (redis://, or rediss:// for TLS):
//
//	redis://[user:password@]host:port/db                           one server
//	redis://[user:password@]host:port/db?master_name=M&addr=h2:p2  Sentinel: host:port and each
//	                                                               addr are sentinels of master M
//	redis://[user:password@]host:port?addr=h2:p2&addr=h3:p3        Cluster: seed nodes
//
// Other query parameters are go-redis's (ParseURL, ParseFailoverURL, ParseClusterURL); the
// timeouts are always Options.Timeout and calls are never retried. Open does not wait for Redis
// to answer: a Store opened while Redis is down works as soon as Redis is up.
func Open(rawURL string, o Options) (*Store, error) {
	o = o.withDefaults()
	newClient, err := parseURL(rawURL, o)
	if err != nil {
		return nil, err
	}
	if o.Log != nil {
		setClientLog(o.Log, rawURL)
	}
	return New(newClient(), o), nil
}

// CheckURL refuses a state.redis_url that Open would refuse, with Open's error; it makes no
// client and dials nothing (`payrouter check` runs it).
func CheckURL(rawURL string) error {
	_, err := parseURL(rawURL, Options{}.withDefaults())
	return err
}

// parseURL parses rawURL as Open does and returns what makes its client (which dials only when
// first used). Errors never echo the URL: it may hold a password.
func parseURL(rawURL string, o Options) (func() redis.UniversalClient, error) {
	if !strings.HasPrefix(rawURL, "redis://") && !strings.HasPrefix(rawURL, "rediss://") {
		return nil, errors.New("redisstore: state.redis_url must start with redis:// or rediss://")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New("redisstore: state.redis_url is not a URL")
	}
	q := u.Query()
	// The three branches set the same fields on three go-redis option types that share no type
	// to set them through (UniversalOptions has no DialerRetries).
	switch {
	case q.Has("master_name"):
		fo, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redisstore: state.redis_url (Sentinel): %w", err)
		}
		fo.DialTimeout, fo.ReadTimeout, fo.WriteTimeout, fo.PoolTimeout = o.Timeout, o.Timeout, o.Timeout, o.Timeout
		fo.ContextTimeoutEnabled, fo.MaxRetries, fo.DialerRetries = true, -1, 1
		if o.PoolSize > 0 {
			fo.PoolSize = o.PoolSize
		}
		return func() redis.UniversalClient { return redis.NewFailoverClient(fo) }, nil
	case q.Has("addr"):
		co, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redisstore: state.redis_url (Cluster): %w", err)
		}
		co.DialTimeout, co.ReadTimeout, co.WriteTimeout, co.PoolTimeout = o.Timeout, o.Timeout, o.Timeout, o.Timeout
		co.ContextTimeoutEnabled, co.MaxRetries, co.DialerRetries = true, -1, 1
		if o.PoolSize > 0 {
			co.PoolSize = o.PoolSize
		}
		return func() redis.UniversalClient { return redis.NewClusterClient(co) }, nil
	default:
		ro, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redisstore: state.redis_url: %w", err)
		}
		ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout, ro.PoolTimeout = o.Timeout, o.Timeout, o.Timeout, o.Timeout
		// No retries: a retry doubles the wait a request pays for a slow Redis. One dial per
		// attempt: go-redis otherwise dials 5 times 100ms apart, so a Redis that refuses
		// connections would cost every call its whole timeout instead of failing at once.
		ro.ContextTimeoutEnabled, ro.MaxRetries, ro.DialerRetries = true, -1, 1
		if o.PoolSize > 0 {
			ro.PoolSize = o.PoolSize
		}
		return func() redis.UniversalClient { return redis.NewClient(ro) }, nil
	}
}

// New returns a Store over a client the caller made (Sentinel, Cluster, or options Open does not
// offer). The caller should give the client tight timeouts and no retries, as Open does.
func New(rdb redis.UniversalClient, o Options) *Store {
	return &Store{rdb: rdb, opts: o.withDefaults()}
}

// Ping reports whether Redis answers within the timeout.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.rdb.Ping(ctx).Err()
}

// Close closes the client's connections.
func (s *Store) Close() error { return s.rdb.Close() }

// bound gives ctx the store's timeout, unless its own deadline is sooner.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.opts.Timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// key returns prefix + the parts joined by ":", the second part (the thing the key is about)
// wrapped as a Cluster hash tag: key("lease", "probe/paywell") is
// "payrouter:lease:{probe/paywell}".
func (s *Store) key(kind, subject string, rest ...string) string {
	k := s.opts.Prefix + kind + ":{" + subject + "}"
	for _, r := range rest {
		k += ":" + r
	}
	return k
}

// IsUnavailable reports whether err says Redis could not be reached or could not serve (a
// refused or broken connection, a timeout, a closed client, a server that is loading, read only
// or failing over), as opposed to a caller's mistake (an empty breaker name, impossible rules) or
// a caller that gave up. statestore goes down on the first such error: its callers then stop
// waiting on Redis and keep their breakers local until it answers again.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false // the caller went away; Redis may be fine
	}
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	// Server errors that say "not now" rather than "wrong command" (redis.Nil is a redis.Error
	// too, and means only "no such key").
	var redisErr redis.Error
	if errors.As(err, &redisErr) && !errors.Is(err, redis.Nil) {
		for _, p := range []string{"LOADING", "READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "BUSY", "NOREPLICAS", "MOVED", "ASK"} {
			if strings.HasPrefix(redisErr.Error(), p) {
				return true
			}
		}
	}
	return false
}
