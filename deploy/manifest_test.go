package deploy

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/timeout-tracer/tracer/export"
)

var semver = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// The capabilities the agent needs, each explained in daemonset.yaml and
// README.md. Adding one must be a deliberate change of this list too.
var wantCaps = []string{"BPF", "PERFMON", "SYS_PTRACE", "SYS_RESOURCE"}

type objects struct {
	ns      *corev1.Namespace
	sa      *corev1.ServiceAccount
	role    *rbacv1.ClusterRole
	binding *rbacv1.ClusterRoleBinding
	cm      *corev1.ConfigMap
	ds      *appsv1.DaemonSet
}

func load(t *testing.T) objects {
	t.Helper()
	objs, err := Objects()
	if err != nil {
		t.Fatal(err)
	}
	var m objects
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Namespace:
			m.ns = o
		case *corev1.ServiceAccount:
			m.sa = o
		case *rbacv1.ClusterRole:
			m.role = o
		case *rbacv1.ClusterRoleBinding:
			m.binding = o
		case *corev1.ConfigMap:
			m.cm = o
		case *appsv1.DaemonSet:
			m.ds = o
		default:
			t.Errorf("unexpected object %T in the manifest", o)
		}
	}
	if len(objs) != 6 || m.ns == nil || m.sa == nil || m.role == nil || m.binding == nil || m.cm == nil || m.ds == nil {
		t.Fatalf("want one each of Namespace, ServiceAccount, ClusterRole, ClusterRoleBinding, ConfigMap, DaemonSet; got %d objects", len(objs))
	}
	return m
}

func TestStrictDecodingRejects(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\nautomount: true\n", "unknown field"},
		{"duplicate field", "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a}\nmetadata: {name: b}\n", "already set"},
		{"misspelt securityContext field", "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        securityContext: {readOnlyRootFS: true}\n", "unknown field"},
		{"unknown kind", "apiVersion: v1\nkind: Widget\nmetadata: {name: x}\n", "Widget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decode([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: ok}\n---\n" + tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "document 2") {
				t.Errorf("decode = %v, want an error on document 2 with %q", err, tc.want)
			}
		})
	}
}

func TestNamespaceAndRBAC(t *testing.T) {
	m := load(t)
	const ns = "timeout-tracer"
	if m.ns.Name != ns || m.sa.Namespace != ns || m.ds.Namespace != ns || m.cm.Namespace != ns {
		t.Errorf("objects not all in namespace %s", ns)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}
	if fmt.Sprint(m.role.Rules) != fmt.Sprint(want) || m.role.AggregationRule != nil {
		t.Errorf("ClusterRole rules %+v, want only pods get/list/watch", m.role.Rules)
	}
	b := m.binding
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != m.role.Name || len(b.Subjects) != 1 ||
		b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != m.sa.Name || b.Subjects[0].Namespace != ns {
		t.Errorf("ClusterRoleBinding %+v does not bind the ClusterRole to the ServiceAccount", b)
	}
	if m.ds.Spec.Template.Spec.ServiceAccountName != m.sa.Name {
		t.Errorf("DaemonSet runs as service account %q, want %q", m.ds.Spec.Template.Spec.ServiceAccountName, m.sa.Name)
	}
}

func TestDaemonSetLeastPrivilege(t *testing.T) {
	m := load(t)
	pod := m.ds.Spec.Template.Spec
	if !pod.HostPID || pod.HostNetwork || pod.HostIPC {
		t.Errorf("hostPID %v hostNetwork %v hostIPC %v, want only hostPID", pod.HostPID, pod.HostNetwork, pod.HostIPC)
	}
	if sc := pod.SecurityContext; sc != nil && (len(sc.Sysctls) > 0 || sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeUnconfined) {
		t.Errorf("pod security context loosens the container's: %+v", sc)
	}
	all := append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...)
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			t.Fatalf("container %s has no security context", c.Name)
		}
		if sc.Privileged == nil || *sc.Privileged {
			t.Errorf("container %s: privileged not set false", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s: allowPrivilegeEscalation not set false", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s: root filesystem not read-only", c.Name)
		}
		if sc.Capabilities == nil || fmt.Sprint(sc.Capabilities.Drop) != "[ALL]" {
			t.Errorf("container %s: does not drop ALL capabilities", c.Name)
			continue
		}
		var add []string
		for _, a := range sc.Capabilities.Add {
			add = append(add, strings.TrimPrefix(string(a), "CAP_"))
		}
		if slices.Contains(add, "SYS_ADMIN") {
			t.Errorf("container %s: adds SYS_ADMIN", c.Name)
		}
		if !slices.Equal(add, wantCaps) {
			t.Errorf("container %s adds %v, want exactly %v", c.Name, add, wantCaps)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("container %s: seccomp profile %+v, want RuntimeDefault", c.Name, sc.SeccompProfile)
		}
		if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
			t.Errorf("container %s: unmasked /proc", c.Name)
		}
	}
	caps, err := Capabilities()
	if err != nil || !slices.Equal(caps, wantCaps) {
		t.Errorf("Capabilities() = %v, %v; want %v", caps, err, wantCaps)
	}
	if got := SetprivCaps(caps); got != "+bpf,+perfmon,+sys_ptrace,+sys_resource" {
		t.Errorf("SetprivCaps = %q", got)
	}
}

// Every capability added is explained by a comment right above it.
func TestCapabilitiesDocumented(t *testing.T) {
	lines := strings.Split(string(Manifest()), "\n")
	for _, c := range wantCaps {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "- "+c })
		if i < 1 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
			t.Errorf("capability %s has no comment above it in daemonset.yaml", c)
		}
	}
}

func TestHostMountsReadOnly(t *testing.T) {
	m := load(t)
	pod := m.ds.Spec.Template.Spec
	host := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			host[v.Name] = v.HostPath.Path
		}
	}
	if len(host) == 0 {
		t.Fatal("no hostPath volume: the host's cgroup hierarchy must be mounted")
	}
	for name, p := range host {
		for _, bad := range []string{"/sys/fs/bpf", "/sys/kernel/debug", "/sys/kernel/tracing", "/proc", "/", "/var/run", "/run"} {
			if p == bad {
				t.Errorf("host path %s (%s) mounted: not needed", p, name)
			}
		}
	}
	mounted := map[string]bool{}
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		for _, vm := range c.VolumeMounts {
			p, ok := host[vm.Name]
			if !ok {
				continue
			}
			mounted[vm.Name] = true
			if !vm.ReadOnly {
				t.Errorf("container %s mounts host %s at %s writable", c.Name, p, vm.MountPath)
			}
			if vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly == corev1.RecursiveReadOnlyDisabled {
				t.Errorf("container %s: host %s not recursively read-only (its submounts would be writable)", c.Name, p)
			}
			if vm.MountPropagation != nil && *vm.MountPropagation != corev1.MountPropagationNone {
				t.Errorf("container %s: host %s with mount propagation %s", c.Name, p, *vm.MountPropagation)
			}
		}
	}
	if host["host-cgroup"] != "/sys/fs/cgroup" || !mounted["host-cgroup"] {
		t.Errorf("host /sys/fs/cgroup not mounted (volumes %v)", host)
	}
}

func TestDaemonSetOperations(t *testing.T) {
	m := load(t)
	pod := m.ds.Spec.Template.Spec
	c := pod.Containers[0]

	wantCmd := []string{"tracer", "daemon", "--metrics-addr=:9464", "--log-format=json", "--otlp",
		"--cgroup-root=/host/sys/fs/cgroup", "--node-name=$(NODE_NAME)"}
	if !slices.Equal(append(c.Command, c.Args...), wantCmd) {
		t.Errorf("command %q, want %q", append(c.Command, c.Args...), wantCmd)
	}
	if c.Image == "" {
		t.Error("no image")
	}

	port := func(p intstr.IntOrString) int32 {
		if p.Type == intstr.Int {
			return p.IntVal
		}
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return cp.ContainerPort
			}
		}
		return 0
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", pr.name)
			continue
		}
		if pr.probe.HTTPGet.Path != pr.path || port(pr.probe.HTTPGet.Port) != 9464 {
			t.Errorf("%s probe GET %s on port %d, want %s on 9464", pr.name, pr.probe.HTTPGet.Path, port(pr.probe.HTTPGet.Port), pr.path)
		}
	}

	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[res], c.Resources.Limits[res]
		if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
			t.Errorf("%s: request %s limit %s; want both, request <= limit", res, req.String(), lim.String())
		}
	}

	// A toleration with operator Exists and no key or effect tolerates
	// every taint: the agent runs on every node.
	if !slices.ContainsFunc(pod.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Operator == corev1.TolerationOpExists && tl.Key == "" && tl.Effect == "" && tl.TolerationSeconds == nil
	}) {
		t.Errorf("tolerations %+v do not cover every taint", pod.Tolerations)
	}
	if pod.NodeSelector != nil || pod.Affinity != nil {
		t.Errorf("node selector or affinity restricts the nodes: %v %v", pod.NodeSelector, pod.Affinity)
	}

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME not from spec.nodeName: %+v", e)
	}
	e := env["OTEL_EXPORTER_OTLP_ENDPOINT"]
	switch {
	case e.Value != "":
	case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
		ref := e.ValueFrom.ConfigMapKeyRef
		if ref.Name != m.cm.Name || m.cm.Data[ref.Key] == "" {
			t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT from %s/%s, which the manifest's ConfigMap does not hold", ref.Name, ref.Key)
		}
	default:
		t.Error("no OTEL_EXPORTER_OTLP_ENDPOINT")
	}
}

// Objects decodes to fresh values each call: a caller changing one cannot
// change what the next sees.
func TestObjectsAreFresh(t *testing.T) {
	a, err := DaemonSet()
	if err != nil {
		t.Fatal(err)
	}
	a.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add = nil
	caps, err := Capabilities()
	if err != nil || !slices.Equal(caps, wantCaps) {
		t.Errorf("after changing a decoded copy: %v %v", caps, err)
	}
	var _ runtime.Object = a
}

// envValue resolves a container variable the way the kubelet does for
// literal values and ConfigMap keys of this manifest.
func envValue(t *testing.T, m objects, name string) string {
	t.Helper()
	for _, e := range m.ds.Spec.Template.Spec.Containers[0].Env {
		if e.Name != name {
			continue
		}
		if e.ValueFrom == nil {
			return e.Value
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		if ref == nil || ref.Name != m.cm.Name {
			t.Fatalf("%s from %+v, not from the manifest's ConfigMap", name, e.ValueFrom)
		}
		v, ok := m.cm.Data[ref.Key]
		if !ok {
			t.Fatalf("%s from ConfigMap key %s, which it does not hold", name, ref.Key)
		}
		return v
	}
	return ""
}

// The shipped manifest once sent OTLP/HTTP (the tracer's default) to the
// gRPC port 4317: every span failed against a standard Collector. The
// protocol must be set, known, and match the endpoint's port.
func TestOTLPEndpointAndProtocolAgree(t *testing.T) {
	m := load(t)
	endpoint, protocol := envValue(t, m, "OTEL_EXPORTER_OTLP_ENDPOINT"), envValue(t, m, "OTEL_EXPORTER_OTLP_PROTOCOL")
	if !slices.Contains(export.Protocols, protocol) {
		t.Fatalf("OTEL_EXPORTER_OTLP_PROTOCOL %q, want one of %v (the tracer's default, http/protobuf, must not be left to chance)", protocol, export.Protocols)
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Port() == "" || (u.Scheme != "http" && u.Scheme != "https") {
		t.Fatalf("OTEL_EXPORTER_OTLP_ENDPOINT %q: want an http(s) URL with a port (%v)", endpoint, err)
	}
	wantPort := map[string]string{export.ProtocolGRPC: "4317", export.ProtocolHTTPProtobuf: "4318"}[protocol]
	if u.Port() != wantPort {
		t.Errorf("OTLP %s to port %s: the standard port for %s is %s", protocol, u.Port(), protocol, wantPort)
	}
	if protocol == export.ProtocolGRPC && u.Path != "" && u.Path != "/" {
		t.Errorf("gRPC endpoint %q has a path: gRPC ignores it", endpoint)
	}
	if c := m.ds.Spec.Template.Spec.Containers[0]; !slices.Contains(c.Command, "--otlp") || slices.ContainsFunc(c.Command, func(a string) bool {
		return strings.HasPrefix(a, "--otlp-protocol") || strings.HasPrefix(a, "--otlp-endpoint")
	}) {
		t.Errorf("command %q: want --otlp, with endpoint and protocol only from the ConfigMap (one place to edit)", c.Command)
	}
}

// The image has a version tag (not latest) that `make image` builds and a
// node can use once imported, without a registry.
func TestImageVersionedAndLocal(t *testing.T) {
	m := load(t)
	c := m.ds.Spec.Template.Spec.Containers[0]
	img, err := Image()
	if err != nil || img != c.Image {
		t.Fatalf("Image() = %q, %v; container runs %q", img, err, c.Image)
	}
	name, tag, ok := strings.Cut(img[strings.LastIndex(img, "/")+1:], ":")
	if !ok || tag == "" || tag == "latest" || strings.Contains(img, "@") || name != "tracer" {
		t.Errorf("image %q: want ghcr.io/timeout-tracer/tracer:<version>", img)
	}
	if !semver.MatchString(tag) {
		t.Errorf("image tag %q is not a version (MAJOR.MINOR.PATCH)", tag)
	}
	if c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("imagePullPolicy %s: want IfNotPresent, so that an image imported with ctr is used as it is", c.ImagePullPolicy)
	}
}

func TestPriorityClass(t *testing.T) {
	if p := load(t).ds.Spec.Template.Spec.PriorityClassName; p != "system-node-critical" {
		t.Errorf("priorityClassName %q, want system-node-critical", p)
	}
}
