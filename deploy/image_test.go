package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter/telemetry"
)

// The image under test and the buildah store holding it, set by scripts/check-package.sh.
const (
	imageEnv     = "PAYROUTER_IMAGE"            // e.g. localhost/payrouter-check:check
	simImageEnv  = "PAYROUTER_GATEWAYSIM_IMAGE" // the simulators' image
	storeEnv     = "PAYROUTER_IMAGE_STORE"      // the store's directory (storage/ and run/, vfs)
	wantCommit   = "PAYROUTER_EXPECT_COMMIT"    // the commit the Makefile stamped
	wantVersion  = "PAYROUTER_EXPECT_VERSION"   // the version it stamped ("" for none)
	imageBinary  = "/usr/local/bin/payrouter"
	imageConfigs = "/etc/payrouter"
)

// buildah runs buildah on the store the image was built in.
type buildah struct{ store string }

func (b buildah) cmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "buildah", append([]string{
		"--root", filepath.Join(b.store, "storage"), "--runroot", filepath.Join(b.store, "run"), "--storage-driver", "vfs",
	}, args...)...)
}

func (b buildah) output(t *testing.T, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := b.cmd(t.Context(), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// container is a working container of an image: run executes a command of the image inside
// its root filesystem (chroot isolation: no cgroups needed), as the image's user.
type container struct {
	b    buildah
	name string
}

func (b buildah) from(t *testing.T, image string) container {
	t.Helper()
	name := strings.TrimSpace(string(b.output(t, "from", "--pull-never", image)))
	t.Cleanup(func() { _ = b.cmd(context.Background(), "rm", name).Run() })
	return container{b, name}
}

// run runs argv in the container with env (NAME=value) and the host directories of mounts
// (host:container) bound read-only, and returns its stdout, its stderr and its exit code.
func (c container) run(ctx context.Context, env []string, mounts []string, argv ...string) (stdout, stderr string, code int, err error) {
	args := []string{"run", "--isolation", "chroot"}
	for _, e := range env {
		args = append(args, "--env", e)
	}
	for _, m := range mounts {
		args = append(args, "--volume", m+":ro")
	}
	args = append(args, c.name, "--")
	cmd := c.b.cmd(ctx, append(args, argv...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errOut.String(), ee.ExitCode(), nil
	}
	return out.String(), errOut.String(), 0, err
}

func imageUnderTest(t *testing.T) (buildah, string) {
	t.Helper()
	image, store := os.Getenv(imageEnv), os.Getenv(storeEnv)
	if image == "" || store == "" {
		t.Skipf("%s and %s are not set: `make package` builds the image and runs this test on it", imageEnv, storeEnv)
	}
	if _, err := exec.LookPath("buildah"); err != nil {
		t.Fatalf("%s is set but buildah is not on PATH: apt-get install buildah", imageEnv)
	}
	return buildah{store}, image
}

// imageConfig is the part of an OCI image configuration the tests read.
type imageConfig struct {
	User         string
	Entrypoint   []string
	Cmd          []string
	Env          []string
	ExposedPorts map[string]struct{}
	Labels       map[string]string
}

func inspect(t *testing.T, b buildah, image string) imageConfig {
	t.Helper()
	var info struct {
		OCIv1 struct {
			Config imageConfig `json:"config"`
		}
	}
	if err := json.Unmarshal(b.output(t, "inspect", "--type", "image", image), &info); err != nil {
		t.Fatal(err)
	}
	return info.OCIv1.Config
}

// imageFile is one entry of an image's layers.
type imageFile struct {
	mode     int64
	uid, gid int
	typ      byte
	data     []byte
}

// imageFiles pushes image to an OCI layout and reads every entry of its layers, applied in order.
func imageFiles(t *testing.T, b buildah, image string) map[string]imageFile {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "oci")
	b.output(t, "push", "--quiet", image, "oci:"+dir)
	readJSON := func(path string, v any) {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	blob := func(digest string) string {
		algo, hexd, _ := strings.Cut(digest, ":")
		return filepath.Join(dir, "blobs", algo, hexd)
	}
	var index struct{ Manifests []struct{ Digest string } }
	readJSON(filepath.Join(dir, "index.json"), &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("the OCI layout holds %d manifests, want 1", len(index.Manifests))
	}
	var manifest struct {
		Layers []struct{ Digest, MediaType string }
	}
	readJSON(blob(index.Manifests[0].Digest), &manifest)
	files := map[string]imageFile{}
	for _, l := range manifest.Layers {
		f, err := os.Open(blob(l.Digest))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = bufio.NewReader(f)
		if strings.HasSuffix(l.MediaType, "+gzip") {
			if r, err = gzip.NewReader(r); err != nil {
				t.Fatal(err)
			}
		}
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", l.Digest, err)
			}
			data, _ := io.ReadAll(tr)
			name := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
			files[name] = imageFile{mode: h.Mode & 0o7777, uid: h.Uid, gid: h.Gid, typ: h.Typeflag, data: data}
		}
		f.Close()
	}
	return files
}

// TestImage checks the image `make image` builds, as `make package` built it: its configuration
// (a user that is not root, the entry point), every file in it (the binary, the CA bundle, the
// shipped configurations, nothing else, none writable by its user), and the binary run inside
// it: `payrouter version` names the commit the Makefile stamped, `payrouter check` passes on
// every shipped configuration and on compose.yaml's, refuses the demo's published secrets
// (the image listens beyond loopback), and `payrouter serve` starts and answers its health
// check.
func TestImage(t *testing.T) {
	b, image := imageUnderTest(t)
	cfg := inspect(t, b, image)

	t.Run("configuration", func(t *testing.T) {
		if cfg.User != "65532:65532" {
			t.Errorf("User %q, want 65532:65532: not root, and no name to look up in a file the image lacks", cfg.User)
		}
		if !slices.Equal(cfg.Entrypoint, []string{imageBinary}) || !slices.Equal(cfg.Cmd, []string{"serve", "-config", imageConfigs + "/payrouter.yaml"}) {
			t.Errorf("Entrypoint %q, Cmd %q; want [%s] and serve -config %s/payrouter.yaml", cfg.Entrypoint, cfg.Cmd, imageBinary, imageConfigs)
		}
		for _, p := range []string{"8080/tcp", "9090/tcp"} {
			if _, ok := cfg.ExposedPorts[p]; !ok {
				t.Errorf("port %s not exposed: %v", p, cfg.ExposedPorts)
			}
		}
		for _, e := range []string{"PAYROUTER_LISTEN=:8080", "PAYROUTER_ADMIN_LISTEN=:9090"} {
			if !slices.Contains(cfg.Env, e) {
				t.Errorf("Env %q lacks %s", cfg.Env, e)
			}
		}
		if c := os.Getenv(wantCommit); c != "" && cfg.Labels["org.opencontainers.image.revision"] != c {
			t.Errorf("label org.opencontainers.image.revision %q, want %s", cfg.Labels["org.opencontainers.image.revision"], c)
		}
		if cfg.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
			t.Errorf("label org.opencontainers.image.licenses %q, want Apache-2.0 (LICENSE)", cfg.Labels["org.opencontainers.image.licenses"])
		}
	})

	t.Run("files", func(t *testing.T) {
		files := imageFiles(t, b, image)
		var regular []string
		for name, f := range files {
			if f.typ == tar.TypeDir {
				continue
			}
			regular = append(regular, name)
			if f.typ != tar.TypeReg {
				t.Errorf("%s is of tar type %q, want a regular file: no links, no devices", name, f.typ)
			}
			if f.uid != 0 || f.gid != 0 || f.mode&0o022 != 0 || f.mode&0o7000 != 0 {
				t.Errorf("%s: uid %d, gid %d, mode %04o; want root's, writable by root alone (not by 65532), no setuid", name, f.uid, f.gid, f.mode)
			}
		}
		sort.Strings(regular)
		want := []string{imageConfigs + "/payrouter-redis.yaml", imageConfigs + "/payrouter.yaml", "/etc/ssl/certs/ca-certificates.crt", imageBinary}
		if !slices.Equal(regular, want) {
			t.Errorf("the image holds %q, want exactly %q (no shell, nothing else)", regular, want)
		}
		if f := files[imageBinary]; f.mode != 0o555 || !bytes.HasPrefix(f.data, []byte("\x7fELF")) {
			t.Errorf("%s: mode %04o, want 0555, an ELF executable", imageBinary, f.mode)
		}
		for _, name := range []string{"payrouter.yaml", "payrouter-redis.yaml"} {
			shipped, err := os.ReadFile(filepath.Join("..", "configs", name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(files[imageConfigs+"/"+name].data, shipped) {
				t.Errorf("%s/%s is not configs/%s", imageConfigs, name, name)
			}
		}
		if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(files["/etc/ssl/certs/ca-certificates.crt"].data) {
			t.Errorf("/etc/ssl/certs/ca-certificates.crt holds no PEM certificate")
		}
		for _, dir := range []string{"/", "/etc", "/etc/payrouter", "/usr/local/bin"} {
			if f, ok := files[dir]; ok && (f.uid != 0 || f.mode&0o022 != 0) {
				t.Errorf("directory %s: uid %d, mode %04o; want root's, writable by root only", dir, f.uid, f.mode)
			}
		}
	})

	ctr := b.from(t, image)

	t.Run("version", func(t *testing.T) {
		stdout, stderr, code, err := ctr.run(t.Context(), nil, nil, imageBinary, "version", "-json")
		if err != nil || code != 0 {
			t.Fatalf("payrouter version -json in the image: exit %d, %v\n%s", code, err, stderr)
		}
		var info struct {
			Version   string `json:"version"`
			Commit    string `json:"commit"`
			Modified  bool   `json:"modified"`
			GoVersion string `json:"go_version"`
			Platform  string `json:"platform"`
		}
		if err := json.Unmarshal([]byte(stdout), &info); err != nil {
			t.Fatalf("payrouter version -json: %v: %q", err, stdout)
		}
		if c := os.Getenv(wantCommit); c == "" {
			t.Logf("%s is empty (no git here): the commit the binary says, %q, is not compared", wantCommit, info.Commit)
		} else if info.Commit != c {
			t.Errorf("payrouter version says commit %q; the Makefile stamped %q", info.Commit, c)
		}
		if v := os.Getenv(wantVersion); v != "" && info.Version != v {
			t.Errorf("payrouter version says version %q; the Makefile stamped %q", info.Version, v)
		}
		if info.Version != cfg.Labels["org.opencontainers.image.version"] {
			t.Errorf("payrouter version says version %q, the image's label %q", info.Version, cfg.Labels["org.opencontainers.image.version"])
		}
		// The test and the image's binary are built by the same go (the Makefile's GO).
		if info.GoVersion != runtime.Version() || info.Platform != "linux/"+runtime.GOARCH {
			t.Errorf("payrouter version says %s %s, want %s linux/%s", info.GoVersion, info.Platform, runtime.Version(), runtime.GOARCH)
		}
	})

	// The file list above has no shell; this is what someone trying one meets.
	t.Run("no shell", func(t *testing.T) {
		stdout, stderr, code, err := ctr.run(t.Context(), nil, nil, "/bin/sh", "-c", "true")
		if err != nil || code == 0 {
			t.Errorf("/bin/sh ran in the image (exit %d, %v)", code, err)
		}
		// buildah says why on stderr, though not always before the child's exit is reported
		// (seen once in 3 runs under -race on a loaded machine): the exit code is what counts.
		if !strings.Contains(stdout+stderr, "no such file") {
			t.Logf("/bin/sh in the image: exit %d, %q (buildah lost its reason)", code, stdout+stderr)
		}
	})

	// Secrets as ops would pass them: random, long enough for beyond loopback.
	secrets := []string{
		"PAYROUTER_API_KEY=" + secret(t), "PAYROUTER_ADMIN_TOKEN=" + secret(t),
		"PAYWELL_API_KEY=" + secret(t), "DING_API_KEY=" + secret(t), "TRANGLO_API_KEY=" + secret(t),
	}
	t.Run("check the shipped configurations", func(t *testing.T) {
		for _, name := range []string{"payrouter.yaml", "payrouter-redis.yaml"} {
			stdout, stderr, code, err := ctr.run(t.Context(), secrets, nil, imageBinary, "check", "-config", imageConfigs+"/"+name)
			if err != nil || code != 0 || !strings.Contains(stdout, "paywell: 20 slots / 2s timeout") {
				t.Errorf("payrouter check -config %s/%s in the image: exit %d, %v\n%s%s", imageConfigs, name, code, err, stdout, stderr)
			}
			// The image listens beyond loopback (PAYROUTER_LISTEN=:8080), where the demo's
			// published secrets are refused.
			demo := []string{"PAYROUTER_API_KEY=sk_test_demo", "PAYROUTER_ADMIN_TOKEN=admin_test_demo", "PAYWELL_API_KEY=pw_test_demo", "DING_API_KEY=dg_test_demo", "TRANGLO_API_KEY=tg_test_demo"}
			_, stderr, code, err = ctr.run(t.Context(), demo, nil, imageBinary, "check", "-config", imageConfigs+"/"+name)
			if err != nil || code != 2 || !strings.Contains(stderr, "demo secret") {
				t.Errorf("payrouter check -config %s/%s with the demo's secrets in the image: exit %d (%v), want 2 naming the demo secrets\n%s", imageConfigs, name, code, err, stderr)
			}
		}
	})

	t.Run("check compose.yaml's configuration", func(t *testing.T) {
		c := readCompose(t)
		pr := c.Services["payrouter"]
		vars := map[string]string{}
		for _, v := range requiredVars(t) {
			vars[v] = secret(t)
		}
		var env []string
		for k, v := range pr.Environment {
			value, missing := interpolate(v, vars)
			if len(missing) > 0 {
				t.Fatalf("payrouter's %s needs %v", k, missing)
			}
			env = append(env, k+"="+value)
		}
		var mounts []string
		for _, m := range bindMounts(pr) {
			abs, err := filepath.Abs(m.source)
			if err != nil {
				t.Fatal(err)
			}
			mounts = append(mounts, abs+":"+m.target)
		}
		var command []string
		for _, a := range pr.Command {
			a, _ = interpolate(a, vars)
			command = append(command, a)
		}
		if len(command) < 3 || command[0] != "serve" {
			t.Fatalf("compose's payrouter command %q is no serve", pr.Command)
		}
		// The same command line as serve's, checked: -log-level's value too.
		argv := append([]string{imageBinary, "check"}, command[1:]...)
		for i := 0; i < len(argv); i++ {
			if argv[i] == "-log-level" { // check has no -log-level; serve's is checked below
				if _, err := telemetry.ParseLogLevel(argv[i+1]); err != nil {
					t.Errorf("compose's -log-level %q: %v", argv[i+1], err)
				}
				argv = append(argv[:i], argv[i+2:]...)
				i--
			}
		}
		stdout, stderr, code, err := ctr.run(t.Context(), env, mounts, argv...)
		if err != nil || code != 0 {
			t.Errorf("%s in the image, with compose's environment and mounts: exit %d, %v\n%s%s", strings.Join(argv, " "), code, err, stdout, stderr)
		}
	})

	t.Run("serve answers its health check", func(t *testing.T) {
		// The demo configuration, in memory, on loopback ports the kernel picks: the process
		// runs in the image's root filesystem and shares the host's network.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		env := append(slices.Clone(secrets), "PAYROUTER_LISTEN=127.0.0.1:0", "PAYROUTER_ADMIN_LISTEN=127.0.0.1:0")
		args := []string{"run", "--isolation", "chroot"}
		for _, e := range env {
			args = append(args, "--env", e)
		}
		serveCtx, stopServe := context.WithCancel(ctx)
		cmd := b.cmd(serveCtx, append(args, ctr.name, "--", imageBinary, "serve", "-config", imageConfigs+"/payrouter.yaml")...)
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 10 * time.Second
		pr, pw := io.Pipe()
		cmd.Stderr = pw
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stopServe(); _ = cmd.Wait(); pw.Close() }()
		serving := regexp.MustCompile(`"msg":"payrouter.serving","listen":"([^"]+)","admin_listen":"([^"]+)"`)
		var (
			mu  sync.Mutex
			log strings.Builder
		)
		found := make(chan []string, 1)
		go func() {
			sc := bufio.NewScanner(pr)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				mu.Lock()
				log.WriteString(sc.Text() + "\n")
				mu.Unlock()
				if m := serving.FindStringSubmatch(sc.Text()); m != nil {
					found <- m
				}
			}
		}()
		var addrs []string
		select {
		case addrs = <-found:
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("serve in the image did not log payrouter.serving within a minute:\n%s", log.String())
		}
		for i, url := range []string{"http://" + addrs[1] + "/readyz", "http://" + addrs[2] + "/healthz"} {
			stdout, stderr, code, err := ctr.run(ctx, nil, nil, imageBinary, "healthcheck", "-url", url)
			if err != nil || code != 0 || !strings.Contains(stdout, "answered 200") {
				t.Errorf("payrouter healthcheck -url %s (the %s listener) in the image: exit %d, %v\n%s%s", url, []string{"storefront", "admin"}[i], code, err, stdout, stderr)
			}
		}
	})

	t.Run("gatewaysim", func(t *testing.T) {
		sim := os.Getenv(simImageEnv)
		if sim == "" {
			t.Fatalf("%s is not set: make package builds both images", simImageEnv)
		}
		c := inspect(t, b, sim)
		if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/gatewaysim"}) {
			t.Errorf("gatewaysim's image: User %q, Entrypoint %q; want 65532:65532, /usr/local/bin/gatewaysim", c.User, c.Entrypoint)
		}
		_, stderr, code, err := b.from(t, sim).run(t.Context(), nil, nil, "/usr/local/bin/gatewaysim", "-h")
		if err != nil || code != 0 || !strings.Contains(stderr, "-paywell") {
			t.Errorf("gatewaysim -h in its image: exit %d, %v\n%s", code, err, stderr)
		}
	})
}
