// Package pgtest runs a real, throwaway PostgreSQL for tests: the money store is tested against
// the database it runs on in production, never a fake (docs/architecture.md, Testing). One server
// runs per test binary, in a temporary directory, on a free loopback port, with durability off for
// speed (unless the binary asks for Durable); each test takes a database of its own from it
// (NewDatabase).
//
// A package using it runs its tests through Main (or Run), which stops the server and removes
// its directory when the tests end:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// The server comes from Debian's postgresql package (initdb and pg_ctl under
// /usr/lib/postgresql/<version>/bin) or from PATH. As root, as CI runs, it runs as the
// postgres user the package creates, since PostgreSQL refuses to run as root.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// User is the server's superuser, the user of every URL pgtest gives; it needs no password.
const User = "payrouter"

// Database is the database Start's URL names, created with the server.
const Database = "payrouter"

// install is what to run when no PostgreSQL is found.
const install = "apt-get install postgresql"

var (
	mu      sync.Mutex
	inMain  bool
	durable bool
	srv     *server
	srvErr  error // why the server could not be set up; every later Start fails the same way
	missing string
	dbSeq   atomic.Int64
)

// Option changes how the test binary's server runs (Main, Run).
type Option func()

// Durable runs the server as docs/postgresql.md tells users to run theirs: fsync,
// synchronous_commit and full_page_writes on (PostgreSQL's defaults), so that every commit that
// wrote waits for its WAL to reach the disk. It is for benchmarks of what a commit costs; tests
// keep the fast server, whose answers are the same.
func Durable() { durable = true }

// Main runs the tests of m through Run and exits with their code. Call it from TestMain.
func Main(m *testing.M, opts ...Option) { os.Exit(Run(m, opts...)) }

// Run runs the tests of m, then stops the server if one was started and removes its directory,
// and returns the tests' code: for a TestMain with clean-up of its own after the tests.
func Run(m *testing.M, opts ...Option) int {
	mu.Lock()
	inMain = true
	for _, o := range opts {
		o()
	}
	mu.Unlock()
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if srv != nil {
		srv.shutdown()
		srv = nil
	}
	return code
}

// Start makes sure the test binary's server runs, starting it the first time (and again after
// Stop, resuming it after Pause), and returns the URL of its database Database. Without
// PostgreSQL installed it skips the test, or fails it when CI=true, naming the package to
// install.
func Start(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	s := running(t)
	return s.url(Database)
}

// running returns the server, set up and running; mu is held.
func running(t testing.TB) *server {
	t.Helper()
	if !inMain {
		t.Fatal("pgtest: the package's TestMain must call pgtest.Main(m) or pgtest.Run(m), which stop the server when the tests end")
	}
	if srv == nil && srvErr == nil && missing == "" {
		srv, missing, srvErr = setUp()
	}
	switch {
	case missing != "" && os.Getenv("CI") == "true":
		t.Fatalf("pgtest: %s; the money store is tested against a real PostgreSQL: %s", missing, install)
	case missing != "":
		t.Skipf("pgtest: %s (%s to run these tests)", missing, install)
	case srvErr != nil:
		t.Fatal(srvErr)
	}
	if srv.paused {
		if err := srv.signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		srv.paused = false
	}
	if !srv.up {
		if err := srv.start(); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

// NewDatabase creates an empty database of its own for the test on the running server (Start)
// and returns its URL; it is dropped when the test ends, connections still open or not.
func NewDatabase(t testing.TB) string {
	t.Helper()
	s := func() *server {
		// running may fail the test (runtime.Goexit): the deferred unlock lets TestMain's Run
		// take mu after it, where an unlock after the call left every later test waiting.
		mu.Lock()
		defer mu.Unlock()
		return running(t)
	}()
	name := fmt.Sprintf("pgtest_%d", dbSeq.Add(1))
	if err := s.exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		mu.Lock()
		up := srv != nil && srv.up && !srv.paused
		mu.Unlock()
		if !up {
			return // the server is gone with everything in it
		}
		if err := s.exec("DROP DATABASE " + name + " WITH (FORCE)"); err != nil {
			t.Logf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return s.url(name)
}

// Stop shuts the server down (a fast shutdown: connections are closed at once) and waits until
// it has stopped, for tests of a database that is down. It is started again on the same port,
// with its data, by Start or when the test ends.
func Stop(t testing.TB) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	s := running(t)
	if err := s.pgCtl("stop", "-D", s.data, "-m", "fast", "-w", "-t", "60"); err != nil {
		t.Fatalf("pgtest: stopping the server: %v", err)
	}
	s.up = false
	t.Cleanup(func() { Start(t) })
}

// Pause stops every process of the server with SIGSTOP, for tests of a database that accepts
// connections and then never answers (a frozen machine, a paused VM): the kernel still
// completes TCP handshakes, nothing more. Resume, Start or the end of the test let it go on.
func Pause(t testing.TB) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	s := running(t)
	if err := s.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	s.paused = true
	t.Cleanup(func() { Resume(t) })
}

// Resume lets a paused server go on (SIGCONT); harmless when it is not paused.
func Resume(t testing.TB) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if srv == nil || !srv.paused {
		return
	}
	if err := srv.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	srv.paused = false
}

// server is the test binary's PostgreSQL: its directory (data, socket, log), port, and how its
// programs are run.
type server struct {
	bin    string   // the directory of initdb and pg_ctl
	as     []string // the prefix that runs a program as the server's user (runuser), or none
	dir    string
	data   string
	port   int
	up     bool
	paused bool

	watchdog *exec.Cmd
}

// setUp finds PostgreSQL, creates the cluster and starts it. missing says what is not
// installed; err is any other failure.
func setUp() (s *server, missing string, err error) {
	bin, missing := findBin(debianBins)
	if missing != "" {
		return nil, missing, nil
	}
	s = &server{bin: bin}
	owner := -1
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root; Debian's package creates this user.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, "running as root and there is no postgres user to run PostgreSQL as", nil
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			return nil, "", errors.New("pgtest: running as root, and runuser (util-linux) is not on PATH to run PostgreSQL as postgres")
		}
		owner, _ = strconv.Atoi(u.Uid)
		s.as = []string{runuser, "-u", "postgres", "--"}
	}
	if s.dir, err = os.MkdirTemp("", "pgtest-"); err != nil {
		return nil, "", fmt.Errorf("pgtest: %w", err)
	}
	if owner >= 0 {
		if err := os.Chown(s.dir, owner, -1); err != nil {
			os.RemoveAll(s.dir)
			return nil, "", fmt.Errorf("pgtest: giving %s to postgres: %w", s.dir, err)
		}
	}
	s.data = filepath.Join(s.dir, "data")
	if err := s.run(filepath.Join(bin, "initdb"), "-D", s.data, "-A", "trust", "-U", User,
		"--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		os.RemoveAll(s.dir)
		return nil, "", fmt.Errorf("pgtest: initdb: %w", err)
	}
	s.watch()
	for try := 0; ; try++ {
		s.port, err = freePort()
		if err == nil {
			err = s.start()
		}
		if err == nil || try == 2 {
			break // a port taken between freePort and start is worth another try, not more
		}
	}
	if err != nil {
		s.shutdown()
		return nil, "", err
	}
	if err := s.exec("CREATE DATABASE " + Database); err != nil {
		s.shutdown()
		return nil, "", fmt.Errorf("pgtest: creating database %s: %w", Database, err)
	}
	return s, "", nil
}

// debianBins is where Debian's postgresql packages put initdb, one directory per version.
const debianBins = "/usr/lib/postgresql/*/bin/initdb"

// findBin returns the directory holding initdb and pg_ctl: the newest version matching the
// glob debian, else PATH's; missing says what is not there.
func findBin(debian string) (dir, missing string) {
	found, _ := filepath.Glob(debian)
	version := func(path string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
		return v
	}
	slices.SortFunc(found, func(a, b string) int { return version(b) - version(a) })
	for _, initdb := range found {
		if _, err := os.Stat(filepath.Join(filepath.Dir(initdb), "pg_ctl")); err == nil {
			return filepath.Dir(initdb), ""
		}
	}
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		return "", "PostgreSQL's initdb is neither under /usr/lib/postgresql/*/bin nor on PATH"
	}
	// A symlink on PATH (/usr/local/bin/initdb) points at the directory pg_ctl is in.
	if real, err := filepath.EvalSymlinks(initdb); err == nil {
		initdb = real
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(initdb), "pg_ctl")); err != nil {
		return "", "pg_ctl is not beside " + initdb
	}
	return filepath.Dir(initdb), ""
}

// start starts the server on s.port and waits until it accepts connections. The socket is in
// the server's own directory, so nothing of the system's PostgreSQL is touched.
func (s *server) start() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", s.port, s.dir)
	if !durable {
		opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	if err := s.pgCtl("start", "-D", s.data, "-l", filepath.Join(s.dir, "postgres.log"), "-w", "-t", "60", "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
		return fmt.Errorf("pgtest: starting PostgreSQL on port %d: %w\nits log:\n%s", s.port, err, log)
	}
	s.up = true
	return nil
}

// shutdown stops the server at once and removes its directory: the end of the test binary.
func (s *server) shutdown() {
	if s.paused {
		s.signal(syscall.SIGCONT)
		s.paused = false
	}
	if s.up {
		s.pgCtl("stop", "-D", s.data, "-m", "immediate", "-w", "-t", "30")
		s.up = false
	}
	os.RemoveAll(s.dir)
	if s.watchdog != nil {
		syscall.Kill(-s.watchdog.Process.Pid, syscall.SIGKILL) // its own process group: it and its sleep
		s.watchdog.Wait()
	}
}

// watch starts a watchdog that stops the server and removes its directory should the test
// binary die without Main's clean-up (a test timeout, a kill): leaked servers would pile up
// on the machine. It has a process group of its own, so a Ctrl-C to the tests does not stop it
// before it has done its job.
func (s *server) watch() {
	const script = `parent=$1 data=$2 dir=$3; shift 3
while kill -0 "$parent" 2>/dev/null; do sleep 1; done
pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ]; then
	kill -CONT "$pid" $(ps -o pid= --ppid "$pid" 2>/dev/null) 2>/dev/null
	"$@" stop -D "$data" -m immediate -w -t 30 >/dev/null 2>&1
fi
rm -rf "$dir"`
	args := append([]string{"-c", script, "pgtest-watchdog", strconv.Itoa(os.Getpid()), s.data, s.dir}, s.as...)
	args = append(args, filepath.Join(s.bin, "pg_ctl"))
	cmd := exec.Command("/bin/sh", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cmd.Start() == nil {
		s.watchdog = cmd
	}
}

// pgCtl runs pg_ctl as the server's user.
func (s *server) pgCtl(args ...string) error {
	return s.run(filepath.Join(s.bin, "pg_ctl"), args...)
}

// run runs a PostgreSQL program as the server's user, in the server's directory (the user
// postgres may not be able to enter the test's), returning its output with any failure.
func (s *server) run(prog string, args ...string) error {
	argv := append(slices.Clone(s.as), prog)
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(prog), strings.Join(args, " "), err, out)
	}
	return nil
}

// signal sends sig to every process of the server: the postmaster first, so that it forks no
// new backend meanwhile, then its children (backends, checkpointer, WAL writer...).
func (s *server) signal(sig syscall.Signal) error {
	pids, err := s.pids()
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("pgtest: sending %v to PostgreSQL process %d: %w", sig, pid, err)
		}
	}
	return nil
}

// pids returns the postmaster's pid (from postmaster.pid), then its children's (from /proc).
func (s *server) pids() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(s.data, "postmaster.pid"))
	if err != nil {
		return nil, fmt.Errorf("pgtest: the server's pid: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	postmaster, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return nil, fmt.Errorf("pgtest: postmaster.pid starts with %q, not a pid", line)
	}
	pids := []int{postmaster}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(postmaster) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(stat))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// url is the URL of database name on the server.
func (s *server) url(name string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(User),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + name,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// exec runs one statement as the superuser in the database postgres.
func (s *server) exec(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// freePort asks the kernel for a free loopback port, avoiding the contract suite's 27xxx range
// (as redistest does).
func freePort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("pgtest: finding a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port < 27000 || port >= 28000 {
			return port, nil
		}
	}
	return 0, errors.New("pgtest: no free port outside 27000-27999")
}
