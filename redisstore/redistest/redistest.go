// Package redistest runs a real redis-server for tests: the shared state store is tested against
// the server it runs on in production, never a fake (docs/architecture.md, Testing).
package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Server is one redis-server process on a free loopback port, with no persistence. It is
// stopped when the test that started it ends.
type Server struct {
	Port int
	bin  string
	dir  string
	cmd  *exec.Cmd
}

// Start runs a new redis-server and waits until it accepts connections. It fails the test with
// the way to install redis-server when there is none on PATH: CI installs it (.ci/run).
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH; the Redis store is tested against a real one: apt-get install redis-server (or run .ci/run, which does)")
	}
	s := &Server{Port: freePort(t), bin: bin, dir: t.TempDir()}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Stop kills the server (a crash, not a shutdown) and waits for it to exit; harmless when it is
// not running.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again on the same port, empty, after Stop (or the first time), and
// waits until it accepts connections.
func (s *Server) Restart() error {
	if s.cmd != nil {
		return fmt.Errorf("redistest: redis-server on port %d is already running", s.Port)
	}
	log, err := os.Create(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(s.bin, "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", s.dir)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: starting redis-server: %w", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	out, _ := os.ReadFile(log.Name())
	return fmt.Errorf("redistest: redis-server does not accept connections on %s after 10 s; its log:\n%s", s.Addr(), out)
}

// freePort asks the kernel for a free loopback port, avoiding the contract suite's 27xxx range.
func freePort(t testing.TB) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port < 27000 || port >= 28000 {
			return port
		}
	}
	t.Fatal("redistest: no free port outside 27000-27999")
	return 0
}
