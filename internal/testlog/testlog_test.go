package testlog

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBufferNamed(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { fmt.Fprintf(&b, `{"msg":"a","i":%d}`+"\n"+`{"msg":"b"}`+"\n", i) })
	}
	wg.Wait()
	if got := len(b.Named(t, "a")); got != 8 {
		t.Errorf("Named(a) found %d lines, want 8", got)
	}
	if got := len(Lines(t, b.String(), "c")); got != 0 {
		t.Errorf("Lines(c) found %d lines, want 0", got)
	}
}

func TestAwait(t *testing.T) {
	var b Buffer
	go func() {
		for _, line := range []string{`{"msg":"starting"}`, `{"msg":"ready"}`} {
			_, _ = b.Write([]byte(line + "\n"))
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if !b.Await(ctx, func(text string) bool { return strings.Contains(text, "ready") }) {
		t.Fatalf("Await did not see the line written: %q", b.String())
	}
	ended, end := context.WithCancel(t.Context())
	end()
	if b.Await(ended, func(string) bool { return false }) {
		t.Error("Await with a condition that never holds and an ended context: want false")
	}
}
