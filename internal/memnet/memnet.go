// Package memnet is an in-process network for tests that run servers and their clients inside
// a testing/synctest bubble. Its connections are net.Pipe's, so a goroutine waiting on one is
// durably blocked and the bubble's fake clock moves on; a goroutine waiting on a loopback socket
// is not, and a bubble holding one never advances its clock past it.
package memnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Network is a set of listeners addressed by "host:port"; the zero value is empty and ready.
// It is safe for concurrent use.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*Listener
}

// Listen returns a listener at address, which no other listener of n may hold.
func (n *Network) Listen(address string) (*Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, taken := n.listeners[address]; taken {
		return nil, fmt.Errorf("memnet: listen %s: address in use", address)
	}
	if n.listeners == nil {
		n.listeners = map[string]*Listener{}
	}
	l := &Listener{addr: pipeAddr(address), conns: make(chan net.Conn), done: make(chan struct{})}
	l.forget = func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.listeners, address)
	}
	n.listeners[address] = l
	return l, nil
}

// DialContext connects to the listener at address once it accepts the connection; it fails
// with a refusal when nothing listens there. It has http.Transport's DialContext signature.
func (n *Network) DialContext(ctx context.Context, _, address string) (net.Conn, error) {
	return n.dial(ctx, "", address)
}

// DialFrom is DialContext from the client address from ("10.0.0.2:40000"): the connection's
// LocalAddr, and its server side's RemoteAddr, are from, so a server can tell clients apart by
// address as it would on a real network.
func (n *Network) DialFrom(ctx context.Context, from, address string) (net.Conn, error) {
	return n.dial(ctx, from, address)
}

func (n *Network) dial(ctx context.Context, from, address string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[address]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "memnet", Addr: pipeAddr(address), Err: errors.New("connection refused")}
	}
	client, server := net.Pipe()
	if from != "" {
		client = addrConn{Conn: client, local: pipeAddr(from), remote: pipeAddr(address)}
		server = addrConn{Conn: server, local: pipeAddr(address), remote: pipeAddr(from)}
	}
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
	client.Close()
	server.Close()
	return nil, &net.OpError{Op: "dial", Net: "memnet", Addr: pipeAddr(address), Err: errors.New("connection refused")}
}

// addrConn is one end of a pipe with the addresses of a network connection.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// Transport returns an HTTP transport whose connections are n's; close its idle connections
// when done, or their goroutines outlive the test.
func (n *Network) Transport() *http.Transport {
	return &http.Transport{DialContext: n.DialContext, Proxy: nil}
}

// Serve serves h over HTTP at address (a host name alone gets port 80) until the test ends, and
// returns its base URL.
func (n *Network) Serve(t testing.TB, address string, h http.Handler) string {
	t.Helper()
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		host, port = address, "80"
	}
	l, err := n.Listen(net.JoinHostPort(host, port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		_ = srv.Close() // the listener and every connection, so their goroutines end
		<-served
	})
	if port == "80" {
		return "http://" + host
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Listener is one address of a Network: a net.Listener whose connections are net.Pipe's.
type Listener struct {
	addr   pipeAddr
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	forget func()
}

// Accept waits for the next connection dialed to l, or for l to close.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "memnet", Addr: l.addr, Err: net.ErrClosed}
	}
}

// Close stops l: Accept returns net.ErrClosed and dials are refused; the address is free again.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.forget()
	})
	return nil
}

// Addr is the address l listens at.
func (l *Listener) Addr() net.Addr { return l.addr }

type pipeAddr string

func (a pipeAddr) Network() string { return "memnet" }
func (a pipeAddr) String() string  { return string(a) }
