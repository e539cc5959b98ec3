package testlog

import (
	"fmt"
	"sync"
	"testing"
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
