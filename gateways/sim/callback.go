package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// A gateway calls back: once a pending charge is final (Behavior.Pending), a fake POSTs an event
// naming it to the URL set by PUT /_sim/callback, signed with the secret set there, each fake in
// its own documented form (docs/gateways.md, Gateway webhooks). A delivery that fails (no
// answer, or anything but 2xx) is tried again a few times, then dropped, as a real gateway's
// would be: payrouter's reconciler is the safety net.

// Callback is where a fake calls back, and the secret it signs with. An empty URL: no call back.
type Callback struct {
	URL    string `json:"url"`
	Secret string `json:"secret,omitempty"`
}

// CallbackStats is what GET /_sim/callback shows beside the URL (never the secret).
type CallbackStats struct {
	URL string `json:"url"`
	// Delivered counts the events answered 2xx; Failed the attempts that were not (each retry
	// counts); Dropped the events given up after the last retry.
	Delivered int64 `json:"delivered"`
	Failed    int64 `json:"failed"`
	Dropped   int64 `json:"dropped"`
}

// Signer signs one delivery of body with secret at the time now: the headers it goes with.
type Signer func(body []byte, secret string, now time.Time) http.Header

// callbackRetries are the waits before each retry of a delivery that failed.
var callbackRetries = []time.Duration{250 * time.Millisecond, time.Second, 3 * time.Second}

// callbackTimeout bounds one delivery attempt.
const callbackTimeout = 5 * time.Second

// ParseCallback decodes a PUT /_sim/callback body strictly: {"url": "http://...", "secret":
// "..."}; an empty url turns calling back off; a url needs a secret.
func ParseCallback(r io.Reader) (Callback, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var cb Callback
	if err := dec.Decode(&cb); err != nil {
		return Callback{}, fmt.Errorf(`callback: want a JSON object {"url": "http://127.0.0.1:8080/webhooks/ding", "secret": "..."}: %v`, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Callback{}, errors.New("callback: unexpected data after the JSON object")
	}
	if cb.URL == "" {
		return Callback{}, nil
	}
	u, err := url.Parse(cb.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Callback{}, fmt.Errorf("callback: url %q: want an absolute http:// or https:// URL", cb.URL)
	}
	if cb.Secret == "" {
		return Callback{}, errors.New("callback: a url needs a secret to sign the events with")
	}
	return cb, nil
}

// SetCallback sets where the fake calls back; a zero Callback turns calling back off.
func (s *Server) SetCallback(cb Callback) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callback = cb
	s.cbStats.URL = cb.URL
}

// SetCallbackTransport makes rt carry the call backs (Config.CallbackTransport), for a test that
// builds a fake with its package's New.
func (s *Server) SetCallbackTransport(rt http.RoundTripper) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.client = &http.Client{Transport: rt, Timeout: callbackTimeout, CheckRedirect: s.client.CheckRedirect}
}

// CallbackStats returns where the fake calls back and how its deliveries went since the last
// reset.
func (s *Server) CallbackStats() CallbackStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cbStats
}

// Notify delivers body, signed by sign, to the callback set (nothing when none is), in the
// background, trying again after a failure (callbackRetries). Close stops it.
func (s *Server) Notify(body []byte, sign Signer) {
	s.mu.Lock()
	cb, gen := s.callback, s.gen
	if cb.URL == "" || !s.goLocked() {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	go func() {
		defer s.notifying.Done()
		for i := 0; ; i++ {
			err := s.deliver(cb, body, sign)
			s.mu.Lock()
			counts := s.gen == gen
			switch {
			case err == nil && counts:
				s.cbStats.Delivered++
			case counts:
				s.cbStats.Failed++
				if i == len(callbackRetries) {
					s.cbStats.Dropped++
				}
			}
			s.mu.Unlock()
			if err == nil {
				return
			}
			s.logger.Load().Warn("callback.failed", "gateway", s.name, "attempt", i+1, "err", err)
			if i == len(callbackRetries) {
				return
			}
			t := time.NewTimer(callbackRetries[i])
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return
			}
		}
	}()
}

// goLocked counts one more goroutine Close waits for, unless the fake is closed (false); s.mu
// is held, so that Close, which marks the fake closed under it before waiting, never waits while
// one is added.
func (s *Server) goLocked() bool {
	if s.closed {
		return false
	}
	s.notifying.Add(1)
	return true
}

// deliver makes one attempt.
func (s *Server) deliver(cb Callback, body []byte, sign Signer) error {
	ctx, cancel := context.WithTimeout(context.Background(), callbackTimeout)
	defer cancel()
	stop := context.AfterFunc(s.doneCtx, cancel)
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cb.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range sign(body, cb.Secret, time.Now()) {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.name+"-sim-webhooks/1")
	s.mu.Lock()
	client := s.client
	s.mu.Unlock()
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s answered %d", cb.URL, resp.StatusCode)
	}
	return nil
}

// Create records a new charge for the API call r (Ledger.Create): pending, when the behavior the
// call arrived under has Pending, and then settled that long after, when the fake's OnSettle
// hears of it. Every fake's charge handler calls it.
func (s *Server) Create(r *http.Request, n NewTx) (Tx, bool) {
	b, ok := r.Context().Value(behaviorKey{}).(Behavior)
	if !ok {
		b = s.Behavior()
	}
	n.Pending = b.Pending > 0
	t, created := s.ledger.Create(n)
	if created && n.Pending {
		s.settleAfter(t.ID, b.Pending)
	}
	return t, created
}

// settleAfter settles the pending transaction id after d, unless the fake closes first.
func (s *Server) settleAfter(id string, d time.Duration) {
	s.mu.Lock()
	ok := s.goLocked()
	s.mu.Unlock()
	if !ok {
		return
	}
	go func() {
		defer s.notifying.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.done:
			return
		}
		tx, settled := s.ledger.Settle(id)
		if settled && s.onSettle != nil {
			s.onSettle(tx)
		}
	}()
}

func (s *Server) getCallback(w http.ResponseWriter, _ *http.Request) {
	WriteJSON(w, http.StatusOK, s.CallbackStats())
}

func (s *Server) putCallback(w http.ResponseWriter, r *http.Request) {
	cb, err := ParseCallback(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		WriteJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.SetCallback(cb)
	s.logger.Load().Info("callback", "gateway", s.name, "url", cb.URL)
	WriteJSON(w, http.StatusOK, s.CallbackStats())
}
