package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// helmBinary finds the helm that .ci/deps builds: $TT_HELM, PATH, or
// $(go env GOPATH)/bin.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TT_HELM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			if p := filepath.Join(dir, "bin", "helm"); isExecutable(p) {
				return p
			}
		}
	}
	t.Skip("helm not found on PATH, in $TT_HELM or in $(go env GOPATH)/bin, where .ci/deps builds helm.sh/helm/v3/cmd/helm")
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// helm runs helm on the chart with its caches and config in a temporary
// home (it writes there even to render; the test may run as nobody).
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home+"/cache",
		"HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// kubeVersion is what helm template and lint assume of the cluster: a
// helm built from the module proxy without helm's own link flags assumes
// 1.20, which the chart's kubeVersion (>= 1.30: appArmorProfile,
// recursiveReadOnly) refuses.
const kubeVersion = "1.34.0"

func render(t *testing.T, set ...string) string {
	t.Helper()
	args := []string{"template", "timeout-tracer", "chart", "--kube-version", kubeVersion}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// generic parses a YAML stream into plain objects keyed by kind,
// namespace and name: comments, order and formatting do not count.
func generic(t *testing.T, stream string) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	for _, doc := range strings.Split("\n"+stream, "\n---") {
		if isEmpty([]byte(doc)) {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		var o map[string]any
		if err := json.Unmarshal(j, &o); err != nil {
			t.Fatal(err)
		}
		md, _ := o["metadata"].(map[string]any)
		key := fmt.Sprintf("%v %v/%v", o["kind"], md["namespace"], md["name"])
		if _, dup := objs[key]; dup {
			t.Fatalf("two objects %s", key)
		}
		objs[key] = o
	}
	return objs
}

// The chart's default render is deploy/daemonset.yaml: the same objects
// with the same fields and values.
func TestChartDefaultRenderIsTheManifest(t *testing.T) {
	out := render(t)
	got, want := generic(t, out), generic(t, string(Manifest()))
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("the chart renders no %s", k)
			continue
		}
		if !reflect.DeepEqual(g, w) {
			gj, _ := json.MarshalIndent(g, "", "  ")
			wj, _ := json.MarshalIndent(w, "", "  ")
			t.Errorf("%s differs:\nchart:\n%s\nmanifest:\n%s", k, gj, wj)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart renders %s, which the manifest does not hold", k)
		}
	}
	// And it decodes as strictly as the manifest.
	if _, err := decode([]byte(out)); err != nil {
		t.Error(err)
	}
	if out, err := helm(t, "lint", "--strict", "--kube-version", kubeVersion, "chart"); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
}

// Chart version, appVersion and the manifest's image tag are one version.
func TestChartVersionIsTheImageTag(t *testing.T) {
	b, err := os.ReadFile("chart/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	img, err := Image()
	if err != nil {
		t.Fatal(err)
	}
	tag := img[strings.LastIndex(img, ":")+1:]
	if chart.Version != tag || chart.AppVersion != tag {
		t.Errorf("Chart.yaml version %q appVersion %q, deploy/daemonset.yaml's image tag %q: bump them together", chart.Version, chart.AppVersion, tag)
	}
}

func daemonSetOf(t *testing.T, stream string) *appsv1.DaemonSet {
	t.Helper()
	// Drop the Prometheus Operator's kinds, which the strict decoder does
	// not know; they are checked generically.
	var kept []string
	for _, doc := range strings.Split("\n"+stream, "\n---") {
		if !strings.Contains(doc, "monitoring.coreos.com/") {
			kept = append(kept, doc)
		}
	}
	objs, err := decode([]byte(strings.Join(kept, "\n---")))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			return ds
		}
	}
	t.Fatal("no DaemonSet rendered")
	return nil
}

// Every value reaches the object it configures.
func TestChartValues(t *testing.T) {
	out := render(t,
		"image.repository=registry.example/tt", "image.tag=9.9.9",
		"otlp.endpoint=https://collector.example:4318", "otlp.protocol=http/protobuf",
		"otlp.extraEnv.OTEL_EXPORTER_OTLP_HEADERS=a=b",
		"filters.includeNamespaces={shop,pay}", "filters.excludePods=canary-*", "filters.excludeExes=kubelet",
		"extraArgs={--detail=never}",
		"resources.limits.memory=256Mi", "nodeSelector.pool=apps", "tolerations[0].key=dedicated",
		"tolerations[0].operator=Exists", "priorityClassName=high",
		"namespace.name=obs", "namespace.create=false",
		"service.enabled=true", "serviceMonitor.enabled=true", "podMonitor.enabled=true", "metrics.port=9100",
	)
	ds := daemonSetOf(t, out)
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	wantCmd := []string{"tracer", "daemon", "--metrics-addr=:9100", "--log-format=json", "--otlp",
		"--cgroup-root=/host/sys/fs/cgroup", "--node-name=$(NODE_NAME)",
		"--exclude-exe=kubelet", "--exclude-pod=canary-*", "--include-namespace=shop", "--include-namespace=pay", "--detail=never"}
	if !slices.Equal(c.Command, wantCmd) {
		t.Errorf("command %q, want %q", c.Command, wantCmd)
	}
	if c.Image != "registry.example/tt:9.9.9" || ds.Namespace != "obs" || pod.PriorityClassName != "high" ||
		pod.NodeSelector["pool"] != "apps" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" ||
		c.Resources.Limits.Memory().String() != "256Mi" || c.Ports[0].ContainerPort != 9100 {
		t.Errorf("values not applied: image %s ns %s priority %s nodeSelector %v tolerations %v limits %v ports %v",
			c.Image, ds.Namespace, pod.PriorityClassName, pod.NodeSelector, pod.Tolerations, c.Resources.Limits, c.Ports)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			env[e.Name] = e.ValueFrom.ConfigMapKeyRef.Key
		}
	}
	if env["OTEL_EXPORTER_OTLP_HEADERS"] != "OTEL_EXPORTER_OTLP_HEADERS" {
		t.Errorf("otlp.extraEnv not passed to the container: %v", env)
	}
	objs := generic(t, out)
	cm := objs["ConfigMap obs/timeout-tracer-otlp"]
	if data, _ := cm["data"].(map[string]any); data["OTEL_EXPORTER_OTLP_ENDPOINT"] != "https://collector.example:4318" ||
		data["OTEL_EXPORTER_OTLP_PROTOCOL"] != "http/protobuf" || data["OTEL_EXPORTER_OTLP_HEADERS"] != "a=b" {
		t.Errorf("ConfigMap data %v", cm["data"])
	}
	for _, k := range []string{"Service obs/timeout-tracer", "ServiceMonitor obs/timeout-tracer", "PodMonitor obs/timeout-tracer"} {
		if objs[k] == nil {
			t.Errorf("no %s rendered", k)
		}
	}
	if objs["Namespace <nil>/obs"] != nil || objs["Namespace <nil>/timeout-tracer"] != nil {
		t.Error("namespace.create=false still renders a Namespace")
	}
}

func TestChartOTLPOffAndMisconfigured(t *testing.T) {
	ds := daemonSetOf(t, render(t, "otlp.enabled=false"))
	c := ds.Spec.Template.Spec.Containers[0]
	if slices.Contains(c.Command, "--otlp") || slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return strings.HasPrefix(e.Name, "OTEL_") }) {
		t.Errorf("otlp.enabled=false: command %q env %v", c.Command, c.Env)
	}
	for _, set := range [][]string{
		{"otlp.protocol=http/protobuf"}, // the default endpoint is the gRPC port
		{"otlp.protocol=grpc", "otlp.endpoint=http://c:4318"},
		{"otlp.protocol=http/json"},
		{"serviceMonitor.enabled=true"}, // without the Service
	} {
		args := []string{"template", "timeout-tracer", "chart", "--kube-version", kubeVersion}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if _, err := helm(t, args...); err == nil {
			t.Errorf("helm template with %v rendered; want an error", set)
		}
	}
}
