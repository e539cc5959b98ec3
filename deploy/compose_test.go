package deploy

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeFile is what TestCompose reads of compose.yaml.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   yaml.Node         `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
	Target     string `yaml:"target"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c
}

// composeVar is a ${NAME}, ${NAME:-default} or ${NAME:?message} of compose's interpolation.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-?])([^}]*))?\}`)

// interpolate does what compose does to a value: ${NAME:-default} takes vars[NAME] or the
// default; ${NAME:?message} and ${NAME} take vars[NAME]. missing lists the required ones
// vars lacks.
func interpolate(s string, vars map[string]string) (out string, missing []string) {
	out = composeVar.ReplaceAllStringFunc(s, func(ref string) string {
		m := composeVar.FindStringSubmatch(ref)
		if v, ok := vars[m[1]]; ok && v != "" {
			return v
		}
		if m[2] == "-" {
			return m[3]
		}
		missing = append(missing, m[1])
		return ""
	})
	return out, missing
}

// mount is one bind mount of a service: source relative to deploy/, target in the container.
type mount struct{ source, target string }

func bindMounts(s composeService) []mount {
	var out []mount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if strings.HasPrefix(parts[0], ".") && len(parts) >= 2 {
			out = append(out, mount{parts[0], parts[1]})
		}
	}
	return out
}

// mountedAt is the repository file mounted at target in s, "" when none is.
func mountedAt(s composeService, target string) string {
	for _, m := range bindMounts(s) {
		if m.target == target {
			return filepath.Clean(m.source)
		}
	}
	return ""
}

// requiredVars are compose.yaml's ${NAME:?message} variables: those deploy/.env must set.
func requiredVars(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range composeVar.FindAllStringSubmatch(string(data), -1) {
		if m[2] == "?" {
			seen[m[1]] = true
		}
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// TestCompose: compose.yaml runs what docs/deploy.md says, and every piece points at the others:
// the files it mounts exist in the repository, the health checks and the scrape reach the
// endpoints payrouter's configuration puts them on, the admin listener is published on loopback
// only, and every secret it needs is one deploy/compose-secrets.sh writes.
func TestCompose(t *testing.T) {
	c := readCompose(t)
	var names []string
	for name := range c.Services {
		names = append(names, name)
	}
	sort.Strings(names)
	if want := []string{"gatewaysim", "grafana", "payrouter", "postgres", "prometheus", "redis"}; !slices.Equal(names, want) {
		t.Errorf("services %v, want %v", names, want)
	}

	t.Run("every mounted file exists", func(t *testing.T) {
		for name, s := range c.Services {
			for _, m := range bindMounts(s) {
				if _, err := os.Stat(m.source); err != nil {
					t.Errorf("service %s mounts %s at %s: %v", name, m.source, m.target, err)
				}
			}
		}
	})

	pr := c.Services["payrouter"]
	cfgPath := ""
	for i, a := range pr.Command {
		if a == "-config" && i+1 < len(pr.Command) {
			cfgPath = pr.Command[i+1]
		}
	}
	cfgSource := mountedAt(pr, cfgPath)
	if cfgSource == "" {
		t.Fatalf("payrouter's -config %q is no file compose mounts: %v", cfgPath, pr.Volumes)
	}
	var cfg struct {
		Listen      string `yaml:"listen"`
		AdminListen string `yaml:"admin_listen"`
	}
	cfgText, err := os.ReadFile(cfgSource)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(cfgText, &cfg); err != nil {
		t.Fatalf("%s: %v", cfgSource, err)
	}
	_, storefrontPort, _ := strings.Cut(cfg.Listen, ":")
	_, adminPort, _ := strings.Cut(cfg.AdminListen, ":")
	if storefrontPort == "" || adminPort == "" {
		t.Fatalf("%s: listen %q, admin_listen %q: want a port each", cfgSource, cfg.Listen, cfg.AdminListen)
	}

	t.Run("payrouter", func(t *testing.T) {
		if pr.Build == nil || pr.Build.Target != "payrouter" || c.Services["gatewaysim"].Build == nil || c.Services["gatewaysim"].Build.Target != "gatewaysim" {
			t.Errorf("payrouter and gatewaysim build the Dockerfile's targets payrouter and gatewaysim: %+v, %+v", pr.Build, c.Services["gatewaysim"].Build)
		}
		dockerfile, err := os.ReadFile("../Dockerfile")
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range []string{"payrouter", "gatewaysim"} {
			if !strings.Contains(string(dockerfile), "FROM scratch AS "+target+"\n") {
				t.Errorf("../Dockerfile has no stage %q", target)
			}
		}
		// The image make image tags, with its default IMAGE.
		if img, _ := interpolate(pr.Image, nil); img != "localhost/payrouter:latest" {
			t.Errorf("payrouter's image is %q by default, want localhost/payrouter:latest, what make image tags", img)
		}
		if img, _ := interpolate(c.Services["gatewaysim"].Image, nil); img != "localhost/payrouter-gatewaysim:latest" {
			t.Errorf("gatewaysim's image is %q by default, want localhost/payrouter-gatewaysim:latest", img)
		}
		want := []string{"CMD", "/usr/local/bin/payrouter", "healthcheck", "-url", "http://127.0.0.1:" + storefrontPort + "/readyz"}
		if pr.Healthcheck == nil || !slices.Equal(pr.Healthcheck.Test, want) {
			t.Errorf("payrouter's healthcheck %v, want %v: the image has no shell, and /readyz on the storefront listener says whether both stores answer", pr.Healthcheck, want)
		}
		published := map[string]string{}
		for _, p := range pr.Ports {
			parts := strings.Split(p, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("payrouter publishes %q: want 127.0.0.1:HOST:CONTAINER, loopback only", p)
				continue
			}
			published[parts[2]] = parts[0]
		}
		if published[storefrontPort] == "" || published[adminPort] != "127.0.0.1" {
			t.Errorf("payrouter publishes %v; want the storefront port %s and the admin port %s, on 127.0.0.1", pr.Ports, storefrontPort, adminPort)
		}
		var deps map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := pr.DependsOn.Decode(&deps); err != nil {
			t.Fatalf("payrouter's depends_on: %v", err)
		}
		for _, store := range []string{"postgres", "redis"} {
			if deps[store].Condition != "service_healthy" {
				t.Errorf("payrouter starts before %s answers: depends_on %s is %q, want service_healthy", store, store, deps[store].Condition)
			}
			if h := c.Services[store].Healthcheck; h == nil || len(h.Test) < 2 {
				t.Errorf("%s has no health check for payrouter to wait on", store)
			}
		}
		// Every ${VAR} of payrouter's configuration is in its environment.
		for _, m := range composeVar.FindAllStringSubmatch(string(cfgText), -1) {
			if _, ok := pr.Environment[m[1]]; !ok && m[2] != "-" {
				t.Errorf("%s reads ${%s}; payrouter's environment in compose.yaml does not set it", cfgSource, m[1])
			}
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		p := c.Services["prometheus"]
		cfgTarget := ""
		for _, a := range p.Command {
			if v, ok := strings.CutPrefix(a, "--config.file="); ok {
				cfgTarget = v
			}
		}
		promCfg := mountedAt(p, cfgTarget)
		if promCfg == "" {
			t.Fatalf("prometheus's --config.file %q is no file compose mounts", cfgTarget)
		}
		var pc struct {
			RuleFiles     []string `yaml:"rule_files"`
			ScrapeConfigs []struct {
				JobName       string `yaml:"job_name"`
				MetricsPath   string `yaml:"metrics_path"`
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
			} `yaml:"scrape_configs"`
		}
		data, err := os.ReadFile(promCfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &pc); err != nil {
			t.Fatal(err)
		}
		// Relative rule files are read from the configuration's directory.
		if len(pc.RuleFiles) != 1 || mountedAt(p, path.Join(path.Dir(cfgTarget), pc.RuleFiles[0])) != filepath.Clean("../configs/prometheus/alerts.yml") {
			t.Errorf("prometheus's rule_files %v do not load configs/prometheus/alerts.yml as compose mounts it", pc.RuleFiles)
		}
		if len(pc.ScrapeConfigs) != 1 || pc.ScrapeConfigs[0].JobName != "payrouter" || pc.ScrapeConfigs[0].MetricsPath != "/metrics" ||
			len(pc.ScrapeConfigs[0].StaticConfigs) != 1 || !slices.Equal(pc.ScrapeConfigs[0].StaticConfigs[0].Targets, []string{"payrouter:" + adminPort}) {
			t.Errorf("prometheus scrapes %+v; want job payrouter (the alert rules' tests use it), /metrics on payrouter:%s, the admin listener", pc.ScrapeConfigs, adminPort)
		}
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Skip("promtool is not on PATH (apt-get install prometheus): the configuration's own check is skipped")
		}
		// promtool reads it as Prometheus will: beside the rules, as they are mounted.
		dir := t.TempDir()
		for src, dst := range map[string]string{promCfg: "prometheus.yml", "../configs/prometheus/alerts.yml": pc.RuleFiles[0]} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := exec.Command(promtool, "check", "config", filepath.Join(dir, "prometheus.yml")).CombinedOutput(); err != nil {
			t.Errorf("promtool check config %s: %v\n%s", promCfg, err, out)
		}
	})

	t.Run("grafana", func(t *testing.T) {
		g := c.Services["grafana"]
		var ds struct {
			Datasources []struct {
				Type, URL string
				IsDefault bool `yaml:"isDefault"`
			} `yaml:"datasources"`
		}
		var dash struct {
			Providers []struct {
				Type    string
				Options struct{ Path string }
			} `yaml:"providers"`
		}
		for target, v := range map[string]any{
			"/etc/grafana/provisioning/datasources/payrouter.yaml": &ds,
			"/etc/grafana/provisioning/dashboards/payrouter.yaml":  &dash,
		} {
			src := mountedAt(g, target)
			if src == "" {
				t.Fatalf("grafana mounts nothing at %s", target)
			}
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(data, v); err != nil {
				t.Fatalf("%s: %v", src, err)
			}
		}
		if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" || !ds.Datasources[0].IsDefault {
			t.Errorf("grafana's data sources %+v; want the stack's Prometheus, http://prometheus:9090, as the default", ds.Datasources)
		}
		if len(dash.Providers) != 1 || dash.Providers[0].Type != "file" {
			t.Fatalf("grafana's dashboard providers %+v; want one of type file", dash.Providers)
		}
		home := g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
		if mountedAt(g, home) != filepath.Clean("../configs/grafana/payrouter.json") || path.Dir(home) != dash.Providers[0].Options.Path {
			t.Errorf("configs/grafana/payrouter.json is not mounted in the provider's directory %q as the home dashboard (%q): %v",
				dash.Providers[0].Options.Path, home, g.Volumes)
		}
	})

	t.Run("compose-secrets.sh writes every secret", func(t *testing.T) {
		dir := t.TempDir()
		script, err := os.ReadFile("compose-secrets.sh")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "compose-secrets.sh"), script, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("bash", filepath.Join(dir, "compose-secrets.sh")).CombinedOutput(); err != nil {
			t.Fatalf("compose-secrets.sh: %v\n%s", err, out)
		}
		env := filepath.Join(dir, ".env")
		st, err := os.Stat(env)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf(".env has mode %v, want 0600: it holds the secrets", st.Mode().Perm())
		}
		vars := readEnvFile(t, env)
		for _, v := range requiredVars(t) {
			if len(vars[v]) < 24 {
				t.Errorf(".env sets %s to %q; compose.yaml requires it, and payrouter refuses secrets shorter than 24 characters off loopback", v, vars[v])
			}
		}
		// Run again, it keeps what it wrote.
		if out, err := exec.Command("bash", filepath.Join(dir, "compose-secrets.sh")).CombinedOutput(); err != nil {
			t.Fatalf("compose-secrets.sh, again: %v\n%s", err, out)
		}
		if again := readEnvFile(t, env); !mapsEqual(again, vars) {
			t.Errorf("a second run changed .env")
		}
	})
}

func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			vars[k] = v
		}
	}
	return vars
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
