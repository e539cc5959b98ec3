package listener

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// The accounting of open connections: the cap on them (Options.MaxConnections), each client
// address's share of them (Options.MaxConnectionsPerAddress), and which connection is closed
// to make room for a new one.
//
// A connection is either serving a request (from the moment net/http has read a whole request
// head until its answer is written) or waiting for one: since it connected, or since its last
// answer (a keep-alive connection). Only a waiting connection is ever closed to make room; a
// request in progress never is. Among the waiting ones the order is:
//
//  1. overdue heads: a connection that began a request head, or connected, more than HeadGrace
//     ago and has not sent the whole head yet (silent sockets, slowloris' partial heads), the
//     one waiting longest first. A real client sends its head within milliseconds of starting
//     it, so these are the connections least likely to carry a request.
//  2. idle keep-alive connections with nothing sent since their last answer, idle longest
//     first: their client loses nothing but a connection it would have reused.
//  3. heads within HeadGrace, oldest first: most likely a real request arriving now, closed
//     only when every other connection is serving a request.

// DefaultHeadGrace is how long a connection may take to send a request head before it is among
// the first closed to make room: far longer than a real client takes (a TLS handshake across
// the world and a head take a few hundred milliseconds), far shorter than net/http's
// ReadHeaderTimeout, which closes it anyway.
const DefaultHeadGrace = time.Second

// Label values of what the Observer is told.
const (
	// ReasonMaxConnections: the listener held MaxConnections.
	ReasonMaxConnections = "max_connections"
	// ReasonAddressShare: the new connection's own address held MaxConnectionsPerAddress.
	ReasonAddressShare = "address_share"

	// StateAwaitingHead: a connection that had not sent a whole request head, since it
	// connected or since its last answer: silent, or part of a head.
	StateAwaitingHead = "awaiting_head"
	// StateIdle: a keep-alive connection with nothing sent since its last answer.
	StateIdle = "idle"
)

// logInterval spaces the log lines about connections closed to make room or refused: a flood
// of connections must not become a flood of lines. The counters see every one.
const logInterval = 10 * time.Second

// Observer is told what the cap and the per-address share did to connections. Its methods are
// called on the accepting goroutine and must not block.
type Observer interface {
	// ConnectionClosedForRoom: a waiting connection was closed to make room for a new one;
	// reason is ReasonMaxConnections or ReasonAddressShare, state StateAwaitingHead or StateIdle.
	ConnectionClosedForRoom(reason, state string)
	// ConnectionRefused: a new connection was closed before anything was read from it, because
	// its address held MaxConnectionsPerAddress connections, each serving a request.
	ConnectionRefused()
}

// phase is where an accepted connection is in its life, as the accounting sees it.
type phase int

const (
	phaseNew  phase = iota // connected, no whole request head yet
	phaseBusy              // serving a request (or hijacked: never closed to make room)
	phaseIdle              // its last answer written; waiting for the next request
)

// conn is one accepted connection: the TCP connection under any TLS, counted against the cap
// and its address's share until it closes.
type conn struct {
	net.Conn
	l    *Listener
	addr string // the client address it counts against (addressKey)

	// Guarded by l.mu.
	phase phase
	since time.Time // connected, or its last answer written
	gone  bool      // no longer counted: closed, or closed to make room

	// heard is when the first byte came since the connection last went idle, in nanoseconds
	// since l.epoch plus one; 0: nothing since. Read sets it without the lock.
	heard atomic.Int64
}

// Close closes the connection and gives its place back.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.l.release(c)
	return err
}

// hear notes that bytes came on the connection (the first of a request head, if it waits).
func (c *conn) hear() {
	if c.heard.Load() == 0 {
		c.heard.CompareAndSwap(0, int64(time.Since(c.l.epoch))+1)
	}
}

// closable ranks a connection as a candidate to close to make room: its tier (0 first, see
// the order at the top of this file) and since when it has waited; ok is false for a
// connection serving a request.
func (c *conn) closable(now time.Time) (tier int, waited time.Time, state string, ok bool) {
	switch c.phase {
	case phaseBusy:
		return 0, time.Time{}, "", false
	case phaseIdle:
		h := c.heard.Load()
		if h == 0 {
			return 1, c.since, StateIdle, true
		}
		waited = c.l.epoch.Add(time.Duration(h - 1))
	default:
		waited = c.since
	}
	if now.Sub(waited) >= c.l.opts.HeadGrace {
		return 0, waited, StateAwaitingHead, true
	}
	return 2, waited, StateAwaitingHead, true
}

// addressKey is the client address a connection counts against: the IPv4 address, or the /64
// of an IPv6 address (one host usually holds a whole /64, and counting each address would let
// it cycle through them), as the failed-authentication throttle counts. An address that is no
// IP (an in-process pipe) counts as itself.
func addressKey(a net.Addr) string {
	if a == nil {
		return ""
	}
	s := a.String()
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		host = s
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.Prefix(64)
	if err != nil {
		return host
	}
	return p.String()
}

// closedForRoom is a connection taken out of the count to make room, to be closed and told
// once the lock is released.
type closedForRoom struct {
	c             *conn
	reason, state string
	waited        time.Duration
}

// errRefused is admit's answer to a connection whose address holds its share.
var errRefused = errors.New("listener: the client address holds its share of connections, each serving a request")

// admit counts a new connection in, making room for it when the listener or its address is
// full: it closes the waiting connection to close first (see the order above), of the address
// when the address holds its share, else of the whole listener. When the address holds its
// share and every connection of it is serving a request, the connection is refused
// (errRefused): it does not wait, for a wait here would keep every other address's new
// connections waiting in the kernel's queue behind it. When the listener is full and every
// connection serves a request, it waits for one to end.
func (l *Listener) admit(raw net.Conn) (*conn, error) {
	addr := addressKey(raw.RemoteAddr())
	var victims []closedForRoom
	defer func() { l.closeForRoom(victims) }()
	l.mu.Lock()
	for {
		now := time.Now()
		if share := l.opts.MaxConnectionsPerAddress; share > 0 && len(l.byAddr[addr]) >= share {
			v, ok := l.pickLocked(l.byAddr[addr], now, ReasonAddressShare)
			if !ok {
				held := len(l.byAddr[addr])
				l.mu.Unlock()
				l.refuse(raw, held)
				return nil, errRefused
			}
			victims = append(victims, v)
			continue
		}
		if max := l.opts.MaxConnections; max > 0 && l.open >= max {
			if v, ok := l.pickLocked(l.conns, now, ReasonMaxConnections); ok {
				victims = append(victims, v)
				continue
			}
			// Every connection serves a request: wait for one to end or go idle.
			changed := make(chan struct{})
			l.waiting = append(l.waiting, changed)
			l.mu.Unlock()
			l.closeForRoom(victims)
			victims = nil
			select {
			case <-changed:
			case <-l.done:
				return nil, net.ErrClosed
			}
			l.mu.Lock()
			continue
		}
		c := &conn{Conn: raw, l: l, addr: addr, phase: phaseNew, since: now}
		l.conns[c] = struct{}{}
		if l.byAddr[addr] == nil {
			l.byAddr[addr] = map[*conn]struct{}{}
		}
		l.byAddr[addr][c] = struct{}{}
		l.open++
		l.mu.Unlock()
		return c, nil
	}
}

// pickLocked takes the connection of set to close first out of the count; ok is false when
// every one serves a request.
func (l *Listener) pickLocked(set map[*conn]struct{}, now time.Time, reason string) (closedForRoom, bool) {
	var (
		best      *conn
		bestTier  int
		bestSince time.Time
		bestState string
	)
	for c := range set {
		tier, since, state, ok := c.closable(now)
		if !ok {
			continue
		}
		if best == nil || tier < bestTier || tier == bestTier && since.Before(bestSince) {
			best, bestTier, bestSince, bestState = c, tier, since, state
		}
	}
	if best == nil {
		return closedForRoom{}, false
	}
	l.dropLocked(best)
	return closedForRoom{c: best, reason: reason, state: bestState, waited: now.Sub(bestSince)}, true
}

// dropLocked takes c out of the count.
func (l *Listener) dropLocked(c *conn) {
	if c.gone {
		return
	}
	c.gone = true
	delete(l.conns, c)
	if m := l.byAddr[c.addr]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(l.byAddr, c.addr)
		}
	}
	l.open--
}

// release gives a closed connection's place back.
func (l *Listener) release(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !c.gone {
		l.dropLocked(c)
		l.wakeLocked()
	}
}

// wakeLocked wakes every admit waiting for a connection to end or go idle.
func (l *Listener) wakeLocked() {
	for _, ch := range l.waiting {
		close(ch)
	}
	l.waiting = nil
}

// closeForRoom closes the connections taken out of the count, tells the Observer, and logs
// once in a while. The TCP connection is closed under any TLS: a close_notify could wait on a
// client that reads nothing. The connection's goroutine in net/http then fails its read and
// closes the rest.
func (l *Listener) closeForRoom(victims []closedForRoom) {
	for _, v := range victims {
		v.c.Conn.Close()
		if l.opts.Observer != nil {
			l.opts.Observer.ConnectionClosedForRoom(v.reason, v.state)
		}
		if since, ok := l.closedLog.due(time.Now()); ok {
			l.log.Info("listener.connection_closed_for_room", "listener", l.opts.Name,
				"client_address", v.c.RemoteAddr().String(), "reason", v.reason, "state", v.state,
				"waited_ms", v.waited.Milliseconds(), "closed_for_room_since_last_line", since,
				"why", closedWhy(v.reason),
				"then", "the new connection is served; a request in progress is never closed; one line at most every "+logInterval.String())
		}
	}
}

func closedWhy(reason string) string {
	if reason == ReasonAddressShare {
		return "its client address held max_connections_per_address and opened another connection; of its connections this one had waited longest without a request"
	}
	return "the listener held max_connections; of its connections this one had waited longest without a request"
}

// refuse closes a new connection of an address that holds its share, all serving requests.
func (l *Listener) refuse(raw net.Conn, held int) {
	raw.Close()
	if l.opts.Observer != nil {
		l.opts.Observer.ConnectionRefused()
	}
	if since, ok := l.refusedLog.due(time.Now()); ok {
		l.log.Warn("listener.connection_refused", "listener", l.opts.Name,
			"client_address", raw.RemoteAddr().String(), "address_connections", held,
			"max_connections_per_address", l.opts.MaxConnectionsPerAddress, "refused_since_last_line", since,
			"why", "this client address holds max_connections_per_address connections of the listener, each serving a request, so none could be closed to make room",
			"then", "the new connection was closed before anything was read from it; one line at most every "+logInterval.String())
	}
}

// sampledLog lets one line through per logInterval and counts the events in between.
type sampledLog struct {
	mu    sync.Mutex
	last  time.Time
	count int // events since the last line, this one included
}

// due counts an event and reports whether to log it now, with the number of events since the
// last line (this one included).
func (s *sampledLog) due(now time.Time) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	if !s.last.IsZero() && now.Sub(s.last) < logInterval {
		return 0, false
	}
	n := s.count
	s.last, s.count = now, 0
	return n, true
}

// Open returns how many connections the listener holds now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}
