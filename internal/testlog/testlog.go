// Package testlog is what tests need of payrouter's JSON log lines: a buffer that the code under
// test and the test may use from several goroutines, and the lines of one event, decoded.
package testlog

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// Buffer is an io.Writer safe for concurrent writes and reads.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// wrote, when a reader waits (Await), is closed by the next write.
	wrote chan struct{}
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wrote != nil {
		close(b.wrote)
		b.wrote = nil
	}
	return b.buf.Write(p)
}

// Await waits until cond holds of everything written so far, checking it after each write
// rather than on a timer; it reports false if ctx ends first.
func (b *Buffer) Await(ctx context.Context, cond func(text string) bool) bool {
	for {
		b.mu.Lock()
		text := b.buf.String()
		if b.wrote == nil {
			b.wrote = make(chan struct{})
		}
		wrote := b.wrote
		b.mu.Unlock()
		if cond(text) {
			return true
		}
		select {
		case <-wrote:
		case <-ctx.Done():
			return false
		}
	}
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Named returns the lines written so far whose msg is msg, decoded (Lines).
func (b *Buffer) Named(t testing.TB, msg string) []map[string]any {
	t.Helper()
	return Lines(t, b.String(), msg)
}

// Lines decodes the JSON lines of text whose msg is msg; a line that is not JSON fails t.
func Lines(t testing.TB, text, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
