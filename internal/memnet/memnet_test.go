package memnet_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter/internal/memnet"
)

// TestSlowServerInABubble: a server that takes a minute to answer is answered after exactly a
// minute of the bubble's clock, and a client that gives up first sees its deadline and the
// server sees the client go: neither would move the clock over a loopback socket.
func TestSlowServerInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n memnet.Network
		gone := make(chan struct{})
		url := n.Serve(t, "slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(time.Minute):
				_, _ = io.WriteString(w, "late")
			case <-r.Context().Done():
				close(gone)
			}
		}))
		tr := n.Transport()
		t.Cleanup(tr.CloseIdleConnections)
		client := &http.Client{Transport: tr}

		start := time.Now()
		resp, err := client.Get(url + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "late" || time.Since(start) != time.Minute {
			t.Errorf("got %q after %v; want \"late\" after 1m0s", body, time.Since(start))
		}

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"/", nil)
		start = time.Now()
		if _, err := client.Do(req); err == nil || ctx.Err() == nil || time.Since(start) != time.Second {
			t.Errorf("a client with a 1s deadline: err %v after %v; want its deadline after 1s", err, time.Since(start))
		}
		<-gone // the handler saw the client leave
	})
}

func TestDialNowhereIsRefused(t *testing.T) {
	var n memnet.Network
	if _, err := n.DialContext(t.Context(), "tcp", "nobody:80"); err == nil {
		t.Error("dial to an address nothing listens at: want an error")
	}
	l, err := n.Listen("once:80")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Listen("once:80"); err == nil {
		t.Error("a second listener at one address: want an error")
	}
	l.Close()
	if _, err := n.DialContext(t.Context(), "tcp", "once:80"); err == nil {
		t.Error("dial to a closed listener: want an error")
	}
	if _, err := l.Accept(); err == nil {
		t.Error("Accept on a closed listener: want an error")
	}
}

// TestDialFromNamesTheClient: a server sees the address a client dialed from as the
// connection's RemoteAddr, and a plain dial as the pipe it is.
func TestDialFromNamesTheClient(t *testing.T) {
	var n memnet.Network
	url := n.Serve(t, "who", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.RemoteAddr)
	}))
	get := func(dial func(ctx context.Context, network, addr string) (net.Conn, error)) string {
		t.Helper()
		tr := &http.Transport{DialContext: dial}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(url + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	from := func(ctx context.Context, _, addr string) (net.Conn, error) {
		return n.DialFrom(ctx, "10.0.0.2:40000", addr)
	}
	if got := get(from); got != "10.0.0.2:40000" {
		t.Errorf("dialed from 10.0.0.2:40000, the server saw %q", got)
	}
	if got := get(n.DialContext); got != "pipe" {
		t.Errorf("a plain dial: the server saw %q, want pipe", got)
	}
}
