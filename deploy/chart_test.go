package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/payrouter/payrouter/internal/testlog"
	"github.com/payrouter/payrouter/pgstore/pgtest"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	helmEnv   = "PAYROUTER_HELM" // a helm binary, set by scripts/check-package.sh
	chartDir  = "helm/payrouter"
	kubeFloor = "1.30.0" // the oldest Kubernetes the chart supports (Chart.yaml's kubeVersion)
)

// object is one manifest helm renders; spec is decoded by kind.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec yaml.Node         `yaml:"spec"`
	Data map[string]string `yaml:"data"`
}

// intOrString is a port given by name or by number.
type intOrString struct {
	Int int
	Str string
}

func (p *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if i, err := strconv.Atoi(n.Value); err == nil {
		p.Int = i
		return nil
	}
	p.Str = n.Value
	return nil
}

type probe struct {
	HTTPGet *struct {
		Path   string      `yaml:"path"`
		Port   intOrString `yaml:"port"`
		Scheme string      `yaml:"scheme"`
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

type podContainer struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	EnvFrom []struct {
		SecretRef *struct{ Name string } `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	StartupProbe   *probe `yaml:"startupProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      *struct {
		PreStop *struct {
			Sleep *struct{ Seconds int } `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type podSpec struct {
	AutomountServiceAccountToken *bool `yaml:"automountServiceAccountToken"`
	SecurityContext              struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    int   `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	TerminationGracePeriodSeconds int            `yaml:"terminationGracePeriodSeconds"`
	RestartPolicy                 string         `yaml:"restartPolicy"`
	Containers                    []podContainer `yaml:"containers"`
	Volumes                       []struct {
		Name      string                 `yaml:"name"`
		ConfigMap *struct{ Name string } `yaml:"configMap"`
	} `yaml:"volumes"`
}

type podTemplate struct {
	Metadata struct {
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec podSpec `yaml:"spec"`
}

type deploymentSpec struct {
	Replicas int `yaml:"replicas"`
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template podTemplate `yaml:"template"`
}

type serviceSpec struct {
	Selector map[string]string `yaml:"selector"`
	Ports    []struct {
		Name       string      `yaml:"name"`
		Port       int         `yaml:"port"`
		TargetPort intOrString `yaml:"targetPort"`
	} `yaml:"ports"`
}

type pdbSpec struct {
	MinAvailable int `yaml:"minAvailable"`
	Selector     struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
}

type jobSpec struct {
	Template podTemplate `yaml:"template"`
}

// rendered is what `helm template` made of the chart with some values.
type rendered struct {
	objects []object
	text    string
}

func helmBinary(t *testing.T) string {
	t.Helper()
	helm := os.Getenv(helmEnv)
	if helm == "" {
		t.Skipf("%s is not set: `make package` builds helm and runs this test with it", helmEnv)
	}
	return helm
}

// template runs helm template on the chart with --set values; an error is helm's own message.
func template(t *testing.T, sets ...string) (rendered, error) {
	t.Helper()
	args := []string{"template", "payrouter", chartDir, "--namespace", "shop", "--kube-version", kubeFloor}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), helmBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return rendered{}, fmt.Errorf("%v: %s", err, stderr.String())
	}
	r := rendered{text: stdout.String()}
	dec := yaml.NewDecoder(&stdout)
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("helm template's output does not parse: %v", err)
		}
		if o.Kind != "" {
			r.objects = append(r.objects, o)
		}
	}
	return r, nil
}

func mustTemplate(t *testing.T, sets ...string) rendered {
	t.Helper()
	r, err := template(t, sets...)
	if err != nil {
		t.Fatalf("helm template --set %v: %v", sets, err)
	}
	return r
}

// one returns the object of kind named name, decoding its spec into spec.
func (r rendered) one(t *testing.T, kind, name string, spec any) object {
	t.Helper()
	for _, o := range r.objects {
		if o.Kind == kind && o.Metadata.Name == name {
			if spec != nil {
				if err := o.Spec.Decode(spec); err != nil {
					t.Fatalf("%s %s: %v", kind, name, err)
				}
			}
			return o
		}
	}
	t.Fatalf("helm template rendered no %s %s", kind, name)
	return object{}
}

func (r rendered) kinds() []string {
	var out []string
	for _, o := range r.objects {
		out = append(out, o.Kind+"/"+o.Metadata.Name)
	}
	slices.Sort(out)
	return out
}

// listenPorts reads the listen and admin_listen ports of a rendered payrouter.yaml.
func listenPorts(t *testing.T, cfg string) (storefront, admin int) {
	t.Helper()
	var c struct {
		Listen      string `yaml:"listen"`
		AdminListen string `yaml:"admin_listen"`
	}
	if err := yaml.Unmarshal([]byte(cfg), &c); err != nil {
		t.Fatalf("the rendered payrouter.yaml: %v", err)
	}
	port := func(addr string) int {
		_, p, err := net.SplitHostPort(addr)
		n, err2 := strconv.Atoi(p)
		if err != nil || err2 != nil {
			t.Fatalf("the rendered payrouter.yaml listens on %q", addr)
		}
		return n
	}
	return port(c.Listen), port(c.AdminListen)
}

// portOf resolves a probe's or a Service's port (a name or a number) against the container's.
func portOf(c podContainer, p intOrString) int {
	if p.Int != 0 {
		return p.Int
	}
	for _, cp := range c.Ports {
		if cp.Name == p.Str {
			return cp.ContainerPort
		}
	}
	return 0
}

// TestChart renders the Helm chart and checks what Kubernetes would be given: the probes on the
// endpoints and listeners docs/api.md gives them, a Service with the storefront's port only,
// secrets from a Secret and never in the chart, the migrations as a hook Job that runs before the
// pods, a PodDisruptionBudget, pods that run as 65532 on a read-only filesystem; values it must
// refuse are refused, naming the value. Then it runs what the chart renders, with the binary
// built from this tree, on a real PostgreSQL and Redis: the Job's command, then the
// Deployment's, and asks each probe what the kubelet would.
func TestChart(t *testing.T) {
	helmBinary(t)
	r := mustTemplate(t)
	want := []string{"ConfigMap/payrouter", "ConfigMap/payrouter-migrate", "Deployment/payrouter", "Job/payrouter-migrate", "PodDisruptionBudget/payrouter", "Service/payrouter"}
	if got := r.kinds(); !slices.Equal(got, want) {
		t.Errorf("helm template renders %v, want %v", got, want)
	}
	if strings.Contains(r.text, "kind: Secret") {
		t.Errorf("the chart renders a Secret: the secrets must come from one created beside it, never from values")
	}

	var dep deploymentSpec
	r.one(t, "Deployment", "payrouter", &dep)
	pod := dep.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("the pod has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	cfg := r.one(t, "ConfigMap", "payrouter", nil).Data["payrouter.yaml"]
	storefront, admin := listenPorts(t, cfg)

	t.Run("probes", func(t *testing.T) {
		for _, p := range []struct {
			name  string
			probe *probe
			path  string
			port  int
		}{
			// A pod takes traffic once both stores answered it...
			{"startup", c.StartupProbe, "/readyz", storefront},
			// ...and is taken out of the Service only when its own listener does not answer:
			// /readyz would take every pod out at once when a shared store goes away.
			{"readiness", c.ReadinessProbe, "/healthz", storefront},
			// Restarted only when the process does not answer where customers' connections
			// cannot crowd it out.
			{"liveness", c.LivenessProbe, "/healthz", admin},
		} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("no %s probe", p.name)
				continue
			}
			if got := portOf(c, p.probe.HTTPGet.Port); p.probe.HTTPGet.Path != p.path || got != p.port {
				t.Errorf("%s probe: GET %s on port %d, want %s on %d", p.name, p.probe.HTTPGet.Path, got, p.path, p.port)
			}
		}
	})

	t.Run("service", func(t *testing.T) {
		var svc serviceSpec
		r.one(t, "Service", "payrouter", &svc)
		if len(svc.Ports) != 1 || portOf(c, svc.Ports[0].TargetPort) != storefront {
			t.Errorf("the Service's ports %+v; want one, the storefront listener's %d", svc.Ports, storefront)
		}
		for _, p := range svc.Ports {
			if portOf(c, p.TargetPort) == admin {
				t.Errorf("the Service exposes the admin listener (port %d)", admin)
			}
		}
		if !mapsEqual(svc.Selector, dep.Selector.MatchLabels) {
			t.Errorf("the Service selects %v, the Deployment's pods are %v", svc.Selector, dep.Selector.MatchLabels)
		}
		var job jobSpec
		r.one(t, "Job", "payrouter-migrate", &job)
		if selects(svc.Selector, job.Template.Metadata.Labels) {
			t.Errorf("the Service selects the migration Job's pod too (labels %v): traffic would go to a pod that does not listen", job.Template.Metadata.Labels)
		}
	})

	t.Run("pods", func(t *testing.T) {
		if dep.Replicas < 2 {
			t.Errorf("%d replicas by default; a node drain would stop the shop", dep.Replicas)
		}
		if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.RunAsUser != 65532 {
			t.Errorf("pod securityContext %+v: want runAsNonRoot, runAsUser 65532 (the image's)", pod.SecurityContext)
		}
		sc := c.SecurityContext
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
			t.Errorf("container securityContext %+v: want a read-only root filesystem, no privilege escalation, every capability dropped", sc)
		}
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Errorf("the pods get a service account token; payrouter calls no Kubernetes API")
		}
		if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != "payrouter" {
			t.Errorf("envFrom %+v: want the Secret payrouter", c.EnvFrom)
		}
		if !slices.Equal(c.Args, []string{"serve", "-config", "/etc/payrouter/payrouter.yaml", "-log-level", "info"}) {
			t.Errorf("args %q", c.Args)
		}
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds <= 0 {
			t.Errorf("no preStop sleep: connections would meet a listener that stopped accepting before the Service lets the pod go")
		} else if drain := 10 + 5; pod.TerminationGracePeriodSeconds < c.Lifecycle.PreStop.Sleep.Seconds+drain {
			t.Errorf("terminationGracePeriodSeconds %d < preStop %d s + serve's drain %d s (request_timeout + 5 s)", pod.TerminationGracePeriodSeconds, c.Lifecycle.PreStop.Sleep.Seconds, drain)
		}
		if !strings.Contains(cfg, `"database_migrate": false`) {
			t.Errorf("with the migration Job the instances should not migrate (state.database_migrate: false):\n%s", cfg)
		}
		var pdb pdbSpec
		r.one(t, "PodDisruptionBudget", "payrouter", &pdb)
		if !mapsEqual(pdb.Selector.MatchLabels, dep.Selector.MatchLabels) || pdb.MinAvailable < 1 || pdb.MinAvailable >= dep.Replicas {
			t.Errorf("PodDisruptionBudget %+v for %d replicas selecting %v", pdb, dep.Replicas, dep.Selector.MatchLabels)
		}
		// Another configuration rolls the pods.
		other := mustTemplate(t, "config.request_timeout=5s")
		var dep2 deploymentSpec
		other.one(t, "Deployment", "payrouter", &dep2)
		if dep2.Template.Metadata.Annotations["checksum/config"] == dep.Template.Metadata.Annotations["checksum/config"] {
			t.Errorf("a changed configuration leaves the pod template as it was: the pods would keep the old file")
		}
	})

	t.Run("migrations", func(t *testing.T) {
		job := r.one(t, "Job", "payrouter-migrate", nil)
		jobCfg := r.one(t, "ConfigMap", "payrouter-migrate", nil)
		for _, o := range []object{job, jobCfg} {
			if o.Metadata.Annotations["helm.sh/hook"] != "pre-install,pre-upgrade" {
				t.Errorf("%s %s: hook %q, want pre-install,pre-upgrade", o.Kind, o.Metadata.Name, o.Metadata.Annotations["helm.sh/hook"])
			}
		}
		jw, _ := strconv.Atoi(job.Metadata.Annotations["helm.sh/hook-weight"])
		cw, _ := strconv.Atoi(jobCfg.Metadata.Annotations["helm.sh/hook-weight"])
		if cw >= jw {
			t.Errorf("the Job's ConfigMap (weight %d) is not created before the Job (weight %d)", cw, jw)
		}
		if jobCfg.Data["payrouter.yaml"] != cfg {
			t.Errorf("the Job migrates with another configuration than the pods run")
		}
		var spec jobSpec
		job.Spec.Decode(&spec)
		jc := spec.Template.Spec.Containers[0]
		if !slices.Equal(jc.Args, []string{"migrate", "-config", "/etc/payrouter/payrouter.yaml"}) || jc.Image != c.Image || spec.Template.Spec.RestartPolicy != "Never" {
			t.Errorf("the Job runs %q of %s (restartPolicy %q), want migrate -config /etc/payrouter/payrouter.yaml of %s", jc.Args, jc.Image, spec.Template.Spec.RestartPolicy, c.Image)
		}
		owner := mustTemplate(t, "migrations.databaseURLKey=PAYROUTER_DATABASE_OWNER_URL")
		var ospec jobSpec
		owner.one(t, "Job", "payrouter-migrate", &ospec)
		if env := ospec.Template.Spec.Containers[0].Env; len(env) != 1 || env[0].Name != "PAYROUTER_DATABASE_URL" || env[0].ValueFrom == nil ||
			env[0].ValueFrom.SecretKeyRef == nil || env[0].ValueFrom.SecretKeyRef.Key != "PAYROUTER_DATABASE_OWNER_URL" {
			t.Errorf("with migrations.databaseURLKey the Job's env is %+v; want PAYROUTER_DATABASE_URL from that key", env)
		}
		off := mustTemplate(t, "migrations.enabled=false")
		if strings.Contains(off.text, "kind: Job") || !strings.Contains(off.one(t, "ConfigMap", "payrouter", nil).Data["payrouter.yaml"], `"database_migrate": true`) {
			t.Errorf("migrations.enabled=false: want no Job, and instances that migrate at start")
		}
	})

	t.Run("values", func(t *testing.T) {
		named := mustTemplate(t, "secret.name=shop-payrouter", "logLevel=warn")
		var d deploymentSpec
		named.one(t, "Deployment", "payrouter", &d)
		if nc := d.Template.Spec.Containers[0]; nc.EnvFrom[0].SecretRef.Name != "shop-payrouter" || !slices.Contains(nc.Args, "warn") {
			t.Errorf("secret.name and logLevel: envFrom %+v, args %q", nc.EnvFrom, nc.Args)
		}
		for _, bad := range []struct{ set, want string }{
			{"logLevel=verbose", "logLevel"},
			{"loglevel=warn", "loglevel"},
			{"replicaCount=1", "podDisruptionBudget.minAvailable 1 with replicaCount 1"},
			{"config.listen=:1", "config.listen and config.admin_listen are set by the chart"},
			{"image.digest=sha1:abc", "digest"},
		} {
			if _, err := template(t, bad.set); err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("helm template --set %s: %v; want it refused, naming %q", bad.set, err, bad.want)
			}
		}
	})

	t.Run("runs", func(t *testing.T) { runChart(t) })
}

// selects reports whether a selector matches labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// secret is a random secret as ops make them (openssl rand -hex 32).
func secret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// freePort is a loopback port no one listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// runChart runs what the chart renders as the cluster would, with payrouter built from this
// tree in place of the image: the Secret's variables in the environment, the ConfigMaps' files
// where the pods mount them, PostgreSQL and Redis real and reachable.
func runChart(t *testing.T) {
	storefront, admin := freePort(t), freePort(t)
	r := mustTemplate(t, fmt.Sprintf("ports.storefront=%d", storefront), fmt.Sprintf("ports.admin=%d", admin))
	var dep deploymentSpec
	r.one(t, "Deployment", "payrouter", &dep)
	var job jobSpec
	r.one(t, "Job", "payrouter-migrate", &job)

	bin := filepath.Join(t.TempDir(), "payrouter")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "../cmd/payrouter").CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/payrouter: %v\n%s", err, out)
	}
	// The Secret, as docs/deploy.md has ops create it.
	secretData := map[string]string{
		"PAYROUTER_API_KEY": secret(t), "PAYROUTER_ADMIN_TOKEN": secret(t),
		"PAYROUTER_DATABASE_URL": pgtest.NewDatabase(t), "PAYROUTER_REDIS_URL": redistest.Start(t).URL(),
		"PAYWELL_API_KEY": secret(t), "DING_API_KEY": secret(t), "TRANGLO_API_KEY": secret(t),
	}
	// command is a container of the chart run here: its args, its env from the Secret, each
	// ConfigMap it mounts written to a directory of its own in place of the mount path.
	command := func(ctx context.Context, spec podSpec) *exec.Cmd {
		t.Helper()
		c := spec.Containers[0]
		env := []string{"PATH=" + os.Getenv("PATH")}
		for _, ef := range c.EnvFrom {
			if ef.SecretRef == nil || ef.SecretRef.Name != "payrouter" {
				t.Fatalf("%s: envFrom %+v, want the Secret payrouter", c.Name, ef)
			}
			for k, v := range secretData {
				env = append(env, k+"="+v)
			}
		}
		for _, e := range c.Env {
			v := e.Value
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				v = secretData[e.ValueFrom.SecretKeyRef.Key]
			}
			env = append(env, e.Name+"="+v)
		}
		args := slices.Clone(c.Args)
		for _, m := range c.VolumeMounts {
			for _, v := range spec.Volumes {
				if v.Name != m.Name || v.ConfigMap == nil {
					continue
				}
				dir := t.TempDir()
				for file, content := range r.one(t, "ConfigMap", v.ConfigMap.Name, nil).Data {
					if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				for i, a := range args {
					if rest, ok := strings.CutPrefix(a, m.MountPath+"/"); ok {
						args[i] = filepath.Join(dir, rest)
					}
				}
			}
		}
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		return cmd
	}

	// Without the Job first, the pods refuse the schema they find and say what to run.
	out, err := command(t.Context(), dep.Template.Spec).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "payrouter migrate") {
		t.Fatalf("serve on an empty database with state.database_migrate: false: %v, want a refusal naming payrouter migrate\n%s", err, out)
	}
	if out, err := command(t.Context(), job.Template.Spec).CombinedOutput(); err != nil {
		t.Fatalf("the migration Job's command: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var logs testlog.Buffer
	serve := command(ctx, dep.Template.Spec)
	serve.Stdout, serve.Stderr = &logs, &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	defer func() {
		if serve.ProcessState == nil {
			serve.Process.Kill()
			<-exited
		}
	}()

	c := dep.Template.Spec.Containers[0]
	get := func(port int, path string) (int, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The kubelet's probes, in their order: startup until it passes, then the other two.
	for _, p := range []*probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		port := portOf(c, p.HTTPGet.Port)
		deadline := time.Now().Add(time.Duration(p.PeriodSeconds*p.FailureThreshold) * time.Second)
		for {
			code, body := get(port, p.HTTPGet.Path)
			if code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s on port %d: %d %s, still no 200 after the probe's %d x %d s\n%s", p.HTTPGet.Path, port, code, body, p.FailureThreshold, p.PeriodSeconds, logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The Service's port is the storefront's: no admin API there, no metrics.
	for _, path := range []string{"/admin/breakers", "/metrics"} {
		if code, _ := get(storefront, path); code != 404 {
			t.Errorf("GET %s on the Service's port %d: %d, want 404: the admin listener is not behind the Service", path, storefront, code)
		}
	}
	if code, body := get(admin, "/metrics"); code != 200 || !strings.Contains(body, "payrouter_database_up 1") {
		t.Errorf("GET /metrics on the admin port (the pods' prometheus.io/port): %d\n%.300s", code, body)
	}

	// What the kubelet does at the end of the grace period's first part: SIGTERM.
	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(time.Duration(dep.Template.Spec.TerminationGracePeriodSeconds) * time.Second):
		t.Errorf("serve did not stop within terminationGracePeriodSeconds %d after SIGTERM", dep.Template.Spec.TerminationGracePeriodSeconds)
	}
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Errorf("a log line is not JSON: %q", l)
		}
	}
}
