// Package listener is what payrouter's two listeners put between the network and net/http: an
// optional TLS layer whose certificate can be swapped while connections are open; a cap on open
// connections, and on each client address's share of them, that closes a connection waiting
// without a request (silent, part of a head, or idle between requests) to make room for a new
// client and never one serving a request (conns.go); and a guard that refuses requests carrying
// both Content-Length and Transfer-Encoding and closes their connection (RFC 9112 section 6.1),
// which net/http alone does not do.
//
// Use: Listen, then Attach to the http.Server that serves it, then Serve:
//
//	l, err := listener.Listen("tcp", addr, listener.Options{TLS: cfg, MaxConnections: 4096, MaxConnectionsPerAddress: 1024})
//	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 75 * time.Second}
//	l.Attach(srv)
//	srv.Serve(l)
//
// The connections are HTTP/1.1 only: the guard follows HTTP/1.1 framing, and HTTP/2 would put
// any number of requests behind one of the connections the cap counts.
package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a Listener.
type Options struct {
	// Name labels the listener's log lines ("listen", "admin_listen").
	Name string
	// TLS, when not nil, makes the listener serve TLS with these settings (Certificates, ClientCAs,
	// ClientAuth, MinVersion); SetTLS replaces them later. nil: plain TCP.
	TLS *tls.Config
	// MaxConnections is the most connections open at once; 0: no cap.
	MaxConnections int
	// MaxConnectionsPerAddress is the most connections one client address (an IPv4 address,
	// an IPv6 /64) holds open at once; 0: no limit but MaxConnections.
	MaxConnectionsPerAddress int
	// HeadGrace is how long a connection may take to send a request head before it is among
	// the first closed to make room (conns.go); default DefaultHeadGrace.
	HeadGrace time.Duration
	// Observer is told of the connections closed to make room and those refused; nil: none.
	Observer Observer
	// HandshakeTimeout bounds a TLS handshake; default 5s.
	HandshakeTimeout time.Duration
	// Refuse answers a request refused for its framing, on a connection that closes after it.
	// nil: a plain 400.
	Refuse func(w http.ResponseWriter, r *http.Request)
	// Log receives the framing refusals, the failed TLS handshakes, and (one line at most every
	// 10s of each) the connections closed to make room and those refused; nil: slog.Default().
	Log *slog.Logger
}

// Listener is a net.Listener with the layers of the package doc.
type Listener struct {
	inner net.Listener
	opts  Options
	log   *slog.Logger

	tlsConfig atomic.Pointer[tls.Config] // nil for a plain listener
	base      *tls.Config                // hands every handshake the current tlsConfig

	done chan struct{} // closed by Close
	once sync.Once

	epoch                 time.Time // conn.heard counts from here
	closedLog, refusedLog sampledLog

	mu      sync.Mutex
	open    int                           // connections counted
	conns   map[*conn]struct{}            // every connection counted
	byAddr  map[string]map[*conn]struct{} // the same, by client address (addressKey)
	waiting []chan struct{}               // admits waiting for a connection to end or go idle
}

// Listen announces on the local network address and returns the Listener.
func Listen(network, addr string, opts Options) (*Listener, error) {
	inner, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return New(inner, opts), nil
}

// New puts the layers over inner, which the Listener then owns.
func New(inner net.Listener, opts Options) *Listener {
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 5 * time.Second
	}
	if opts.HeadGrace <= 0 {
		opts.HeadGrace = DefaultHeadGrace
	}
	l := &Listener{inner: inner, opts: opts, log: opts.Log, done: make(chan struct{}), epoch: time.Now(),
		conns: map[*conn]struct{}{}, byAddr: map[string]map[*conn]struct{}{}}
	if l.log == nil {
		l.log = slog.Default()
	}
	if opts.TLS != nil {
		l.tlsConfig.Store(prepare(opts.TLS))
		l.base = &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				return l.tlsConfig.Load(), nil
			},
		}
	}
	return l
}

// prepare copies cfg with HTTP/1.1 as the only protocol and TLS 1.2 at least.
func prepare(cfg *tls.Config) *tls.Config {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	return cfg
}

// SetTLS replaces the TLS settings (a rotated certificate, a new client CA) for the handshakes
// that start from now on; connections already open keep theirs. It fails on a plain listener.
func (l *Listener) SetTLS(cfg *tls.Config) error {
	if l.base == nil {
		return errors.New("listener: TLS was not on at start; turning it on needs a restart")
	}
	if cfg == nil {
		return errors.New("listener: no TLS settings")
	}
	l.tlsConfig.Store(prepare(cfg))
	return nil
}

// TLS reports whether the listener serves TLS.
func (l *Listener) TLS() bool { return l.base != nil }

// Addr returns the listener's network address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Close stops accepting; open connections stay open (http.Server.Shutdown closes them).
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.inner.Close()
}

// Accept waits for the next connection and room for it. When the listener or the connection's
// client address is full, a connection waiting without a request is closed to make room (the
// order is in conns.go): a client waiting to be served matters more than one keeping a
// connection for later. A connection whose address holds its share, every one serving a
// request, is closed at once, and Accept goes on to the next. When every connection of the
// listener serves a request, the new one waits for one to end.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		raw, err := l.inner.Accept()
		if err != nil {
			return nil, err
		}
		c, err := l.admit(raw)
		if errors.Is(err, errRefused) {
			continue
		}
		if err != nil {
			raw.Close()
			return nil, err
		}
		g := &guardConn{Conn: c, listener: l, conn: c}
		if l.base != nil {
			g.tls = tls.Server(c, l.base)
			g.Conn = g.tls
		}
		return g, nil
	}
}

// connState follows each connection from waiting to serving a request and back
// (http.Server.ConnState).
func (l *Listener) connState(nc net.Conn, state http.ConnState) {
	g, ok := nc.(*guardConn)
	if !ok {
		return
	}
	c := g.conn
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateActive, http.StateHijacked:
		c.phase = phaseBusy
	case http.StateIdle:
		c.heard.Store(0)
		c.phase, c.since = phaseIdle, time.Now()
		l.wakeLocked()
	}
}

// connKey is the context key of the connection a request came on.
type connKey struct{}

// Attach makes srv serve this listener's connections: it tracks idle connections for the cap,
// refuses the requests the framing guard flags, gives handlers r.TLS, and keeps srv to HTTP/1.1.
// Call it before srv.Serve(l); hooks srv already has still run.
func (l *Listener) Attach(srv *http.Server) {
	prevState, prevContext := srv.ConnState, srv.ConnContext
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		l.connState(c, s)
		if prevState != nil {
			prevState(c, s)
		}
	}
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevContext != nil {
			ctx = prevContext(ctx, c)
		}
		if g, ok := c.(*guardConn); ok {
			ctx = context.WithValue(ctx, connKey{}, g)
		}
		return ctx
	}
	srv.Handler = l.guard(srv.Handler)
	// Every request must reach guard, OPTIONS * included, for the count of requests per
	// connection to match the heads the framing saw.
	srv.DisableGeneralOptionsHandler = true
	var p http.Protocols
	p.SetHTTP1(true)
	srv.Protocols = &p
}

// guard refuses a request the framing flagged, and hands every other one on with r.TLS set.
func (l *Listener) guard(next http.Handler) http.Handler {
	if next == nil {
		next = http.DefaultServeMux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, _ := r.Context().Value(connKey{}).(*guardConn)
		if g == nil {
			next.ServeHTTP(w, r)
			return
		}
		if n := int(g.served.Add(1)); g.refuses(n) {
			l.log.WarnContext(r.Context(), "http.framing_refused", "listener", l.opts.Name, "client_address", g.RemoteAddr().String(),
				"method", r.Method, "path", r.URL.Path,
				"why", "the request has both Content-Length and Transfer-Encoding (or Transfer-Encoding in HTTP/1.0); RFC 9112 section 6.1",
				"then", "answered 400 and the connection closed; nothing after it on the connection was read")
			w.Header().Set("Connection", "close")
			if l.opts.Refuse != nil {
				l.opts.Refuse(w, r)
			} else {
				http.Error(w, "400 Bad Request: both Content-Length and Transfer-Encoding", http.StatusBadRequest)
			}
			return
		}
		if g.tls != nil && r.TLS == nil {
			st := g.tls.ConnectionState()
			r.TLS = &st
		}
		next.ServeHTTP(w, r)
	})
}

// guardConn is one accepted connection: its TLS layer, if any, and the framing guard over the
// plain bytes.
type guardConn struct {
	net.Conn // the tls.Conn, or conn
	listener *Listener
	conn     *conn     // the TCP connection, as the cap counts it
	tls      *tls.Conn // nil on a plain listener

	mu        sync.Mutex // orders Reads (net/http never reads concurrently) and the handshake
	handshake error
	shook     bool
	framing   framing
	// flagged mirrors framing.flagged for the handler goroutine.
	flagged atomic.Int64
	served  atomic.Int64 // requests handed to the guard so far

	deadlineMu      sync.Mutex
	readDL, writeDL time.Time
}

// refuses reports whether the nth request on the connection is to be refused.
func (g *guardConn) refuses(n int) bool {
	f := int(g.flagged.Load())
	return f > 0 && n >= f
}

// Read delivers the plain bytes, as far as the framing allows: after a request with both
// Content-Length and Transfer-Encoding, or bytes net/http would refuse, it reports io.EOF.
func (g *guardConn) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tls != nil && !g.shook {
		g.shook = true
		g.handshake = g.doHandshake()
	}
	if g.handshake != nil {
		return 0, g.handshake
	}
	if g.framing.stopped {
		return 0, io.EOF
	}
	n, err := g.Conn.Read(p)
	if n > 0 {
		g.conn.hear()
		if kept := g.framing.feed(p[:n]); kept < n {
			n, err = kept, nil
		}
		if g.framing.flagged > 0 {
			g.flagged.Store(int64(g.framing.flagged))
		}
		if n == 0 && g.framing.stopped {
			err = io.EOF
		}
	}
	return n, err
}

// doHandshake runs the TLS handshake within HandshakeTimeout, as http.Server does for the
// *tls.Conn it is given (it is given a guardConn), and logs a failure.
func (g *guardConn) doHandshake() error {
	g.deadlineMu.Lock()
	readDL, writeDL := g.readDL, g.writeDL
	g.deadlineMu.Unlock()
	dl := time.Now().Add(g.listener.opts.HandshakeTimeout)
	g.tls.SetDeadline(dl)
	err := g.tls.Handshake()
	if err == nil {
		g.tls.SetReadDeadline(readDL)
		g.tls.SetWriteDeadline(writeDL)
		return nil
	}
	reason := err.Error()
	var re tls.RecordHeaderError
	if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
		io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		reason = "the client sent plain HTTP to the HTTPS listener"
	}
	g.listener.log.Warn("tls.handshake_failed", "listener", g.listener.opts.Name,
		"client_address", g.RemoteAddr().String(), "err", reason)
	return err
}

// looksLikeHTTP reports whether a TLS record header is the start of a plain HTTP request.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "PATCH":
		return true
	}
	return false
}

// The deadlines are remembered so the handshake can set its own and put them back.

func (g *guardConn) SetDeadline(t time.Time) error {
	g.deadlineMu.Lock()
	g.readDL, g.writeDL = t, t
	g.deadlineMu.Unlock()
	return g.Conn.SetDeadline(t)
}

func (g *guardConn) SetReadDeadline(t time.Time) error {
	g.deadlineMu.Lock()
	g.readDL = t
	g.deadlineMu.Unlock()
	return g.Conn.SetReadDeadline(t)
}

func (g *guardConn) SetWriteDeadline(t time.Time) error {
	g.deadlineMu.Lock()
	g.writeDL = t
	g.deadlineMu.Unlock()
	return g.Conn.SetWriteDeadline(t)
}

// CloseWrite half-closes the connection, as net/http does before closing one it answered last.
func (g *guardConn) CloseWrite() error {
	if cw, ok := g.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	if cw, ok := g.conn.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
