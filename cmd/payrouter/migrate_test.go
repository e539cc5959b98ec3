package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter/internal/testlog"
	"github.com/payrouter/payrouter/pgstore/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestMigrate: `payrouter migrate` brings an empty database to this build's schema, and running
// it again (a deploy that always migrates first) changes nothing and still exits 0.
func TestMigrate(t *testing.T) {
	sims := startSims(t)
	path := writeConfig(t, sims, "state: {database_url: \""+pgtest.NewDatabase(t)+"\"}\n")
	for i := range 2 {
		var out, errOut bytes.Buffer
		if err := run(t.Context(), []string{"migrate", "-config", path}, os.Getenv, &out, &errOut); err != nil {
			t.Fatalf("migrate, run %d: %v\n%s", i+1, err, errOut.String())
		}
		if !strings.Contains(out.String(), "schema") {
			t.Errorf("migrate, run %d: want it to say the database is at this build's schema; printed %q", i+1, out.String())
		}
	}
}

// TestServeWaitsForTheDatabase: serve started while its database refuses connections (stopped,
// as in a restart) says so with state_store.waiting lines and starts serving once it answers,
// rather than exiting at the first refused connection.
func TestServeWaitsForTheDatabase(t *testing.T) {
	sims := startSims(t)
	path := writeConfig(t, sims, "state: {database_url: \""+pgtest.NewDatabase(t)+"\"}\n")
	pgtest.Stop(t)
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testlog.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve", "-config", path}, os.Getenv, io.Discard, logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	waiting, stop := context.WithTimeout(t.Context(), 10*time.Second)
	defer stop()
	if !logs.Await(waiting, func(text string) bool { return strings.Count(text, `"msg":"state_store.waiting"`) >= 2 }) {
		t.Fatalf("serve with the database stopped: want state_store.waiting lines; logged:\n%s", logs.String())
	}
	pgtest.Start(t)
	storefront, _ := listeners(t, logs)
	if code := call(t, "GET", storefront+"/readyz", "", ""); code != 200 {
		t.Fatalf("GET /readyz once the database is back = %d; want 200\n%s", code, logs.String())
	}
}
