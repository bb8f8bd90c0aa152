package k8s

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/timeout-tracer/tracer/deploy"
	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/lab/testenv"
)

// Fixed by cluster.sh and e2e.sh.
const (
	nodeIP      = "10.240.0.1"
	nodeName    = "tt-node"
	workNS      = "tt-e2e-work"
	labappImage = "tt-e2e.local/labapp:e2e"
	agentNS     = "timeout-tracer"
	agentDS     = "timeout-tracer"
	jaegerQuery = "http://" + nodeIP + ":16686"
)

// TestKubernetesE2E runs the node agent of deploy/daemonset.yaml in the
// one-node cluster that lab/k8s/e2e.sh (make e2e-k8s) brought up, against
// a client pod whose server is slow, then blackholed, and checks what the
// agent says and what it leaves behind.
func TestKubernetesE2E(t *testing.T) {
	dir := os.Getenv("TT_E2E_K8S_DIR")
	if dir == "" {
		t.Skip("needs a running cluster: make e2e-k8s (lab/k8s/e2e.sh) brings one up and sets TT_E2E_K8S_DIR")
	}
	testenv.Root(t)
	c := newCluster(t, dir)

	bpffsBefore := listDir(t, "/sys/fs/bpf")
	agent := c.applyAgent()
	t.Logf("agent pod %s, host PID %d, image %s", agent.pod, agent.pid, agent.image)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log (last 60 lines):\n%s", tail(c.agentLog(), 60))
		}
	})

	t.Run("capabilities", func(t *testing.T) { c.checkCapabilities(t, agent) })

	c.kubectlStdin(workloadYAML(), "apply", "-f", "-")
	c.kubectl("-n", workNS, "wait", "--for=condition=Ready", "pod/server", "--timeout=120s")
	serverIP := c.kubectl("-n", workNS, "get", "pod", "server", "-o", "jsonpath={.status.podIP}")
	serverPID := c.containerPID(workNS, "server")
	t.Logf("server pod %s, host PID %d", serverIP, serverPID)

	// Phase 1: the server answers after 300 ms, the client gives each
	// request 100 ms: slow_peer. The client runs until enough reports
	// came after the agent traced it (attaching to the node's processes
	// may take it a while).
	c.kubectlStdin(clientYAML("client-slow", serverIP, "-n", "1000000", "-concurrency", "2", "-timeout", "100ms"), "apply", "-f", "-")
	c.waitTraced(t, "client-slow")
	slow := c.waitReports(t, "client-slow", 20, 60*time.Second)
	c.kubectl("-n", workNS, "delete", "pod", "client-slow", "--wait=true", "--timeout=60s")
	t.Run("slow_peer", func(t *testing.T) {
		classes := countClasses(slow)
		t.Logf("client-slow: %d reports, classes %v", len(slow), classes)
		if classes["slow_peer"] < 5 {
			t.Errorf("client-slow: %d slow_peer reports, want at least 5 (classes %v)", classes["slow_peer"], classes)
		}
		for _, k := range []string{"rto", "syn_timeout", "reset", "refused"} {
			if classes[k] > 0 {
				t.Errorf("client-slow: %d reports of class %s on a healthy network", classes[k], k)
			}
		}
	})

	// Phase 2: requests with 1.5 s each succeed, then the node drops
	// everything sent to the server: rto.
	c.kubectlStdin(clientYAML("client-rto", serverIP, "-n", "1000000", "-concurrency", "4", "-timeout", "1500ms"), "apply", "-f", "-")
	c.waitTraced(t, "client-rto")
	c.waitFor(t, "client-rto's first answered requests", 30*time.Second, func() bool {
		return strings.Count(c.kubectlQuiet("-n", workNS, "logs", "client-rto"), `"outcome":"ok"`) >= 8
	})
	if n := len(c.reports("client-rto")); n > 0 {
		t.Errorf("client-rto: %d timeouts before the blackhole (its requests take 300 ms of 1.5 s)", n)
	}
	c.blackhole(serverPID, 8080)
	// Each of the 4 connections times out on RTOs (the first wave, 1.5 s
	// after the blackhole), then every new connection on its SYNs.
	rto := c.waitReports(t, "client-rto", 12, 40*time.Second)
	c.kubectl("-n", workNS, "delete", "pod", "client-rto", "--wait=false")
	t.Run("rto", func(t *testing.T) {
		classes := countClasses(rto)
		var order []string
		for _, r := range rto[:min(len(rto), 12)] {
			order = append(order, string(r.Cause.Class))
		}
		t.Logf("client-rto: %d reports after the blackhole, classes %v; the first 12 in order: %v", len(rto), classes, order)
		if classes["rto"] == 0 {
			t.Errorf("client-rto: no rto report after its server was blackholed (classes %v)", classes)
		}
		// A blackholed peer is never healthy, nor the process's own
		// fault (before the stale socket entries were found, the bound
		// dials read slow_peer "no retransmits").
		for _, k := range []string{"slow_peer", "local"} {
			if classes[k] > 0 {
				t.Errorf("client-rto: %d reports of class %s for a blackholed server", classes[k], k)
			}
		}
		if r := firstOf(rto, "rto"); r != nil {
			b, _ := json.Marshal(r)
			t.Logf("a report from inside the cluster:\n%s", b)
		}
	})

	t.Run("metrics", func(t *testing.T) { c.checkMetrics(t, agent) })
	t.Run("otlp", func(t *testing.T) { c.checkJaeger(t, append(slices.Clone(slow), rto...)) })
	t.Run("log", func(t *testing.T) { c.checkLog(t) })
	t.Run("memory", func(t *testing.T) { c.checkMemory(t, agent) })

	// A rollout replaces the agent: the old one's BPF objects must go.
	agent = c.agent() // the current container, if it restarted
	c.saveAgentLog(agent)
	old := bpfObjects(t, agent.pid)
	c.kubectl("-n", agentNS, "rollout", "restart", "ds/"+agentDS)
	c.kubectl("-n", agentNS, "rollout", "status", "ds/"+agentDS, "--timeout=180s")
	c.waitGone(t, agent.pid)
	t.Run("rollout leaves nothing", func(t *testing.T) { checkGone(t, old) })
	agent = c.agent()

	// Deleting the DaemonSet leaves nothing attached on the node.
	c.saveAgentLog(agent)
	objs := bpfObjects(t, agent.pid)
	c.kubectl("-n", agentNS, "delete", "daemonset", agentDS, "--wait=true", "--timeout=60s")
	c.waitGone(t, agent.pid)
	t.Run("delete leaves nothing", func(t *testing.T) {
		checkGone(t, objs)
		if after := listDir(t, "/sys/fs/bpf"); !slices.Equal(after, bpffsBefore) {
			t.Errorf("/sys/fs/bpf changed: before %v, after %v", bpffsBefore, after)
		}
	})
}

// ------------------------------------------------------------ the cluster

type cluster struct {
	t      *testing.T
	dir    string
	script string
	anchor int // the namespaces' anchor process (cluster.sh)
}

func newCluster(t *testing.T, dir string) *cluster {
	b, err := os.ReadFile(filepath.Join(dir, "anchor.pid"))
	if err != nil {
		t.Fatalf("no cluster in %s: %v", dir, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	_, self, _, _ := runtime.Caller(0)
	return &cluster{t: t, dir: dir, script: filepath.Join(filepath.Dir(self), "cluster.sh"), anchor: pid}
}

// run runs a command inside the cluster's namespaces.
func (c *cluster) run(stdin []byte, args ...string) (string, error) {
	cmd := exec.Command(c.script, append([]string{"exec", c.dir}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

func (c *cluster) kubectl(args ...string) string {
	c.t.Helper()
	out, err := c.run(nil, append([]string{"kubectl"}, args...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *cluster) kubectlQuiet(args ...string) string {
	out, _ := c.run(nil, append([]string{"kubectl"}, args...)...)
	return out
}

func (c *cluster) kubectlStdin(stdin []byte, args ...string) string {
	c.t.Helper()
	out, err := c.run(stdin, append([]string{"kubectl"}, args...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *cluster) waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// containerPID is the host PID of a pod's first container (hostPID or not,
// the agent sees it under this PID).
func (c *cluster) containerPID(ns, pod string) int {
	c.t.Helper()
	id := c.kubectl("-n", ns, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].containerID}")
	id = strings.TrimPrefix(id, "containerd://")
	out, err := c.run(nil, "ctr", "-n", "k8s.io", "tasks", "ls")
	if err != nil {
		c.t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err == nil && pid > 0 {
				return pid
			}
		}
	}
	c.t.Fatalf("no task for container %s of %s/%s in:\n%s", id, ns, pod, out)
	return 0
}

func phase(c *cluster, pod string) string {
	return c.kubectlQuiet("-n", workNS, "get", "pod", pod, "-o", "jsonpath={.status.phase}")
}

// blackhole drops every TCP segment to port in the network namespace of
// the process pid (a pod's): from the node, as an operator would.
func (c *cluster) blackhole(pid, port int) {
	c.t.Helper()
	c.t.Logf("blackholing port %d in the network namespace of PID %d", port, pid)
	if _, err := c.run(nil, "nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "iptables", "-w", "-A", "INPUT",
		"-p", "tcp", "--dport", strconv.Itoa(port), "-j", "DROP"); err != nil {
		c.t.Fatal(err)
	}
}

// httpGet fetches a URL from inside the cluster's network namespace: the
// socket is made on a thread moved into it.
func (c *cluster) httpGet(u string) ([]byte, error) {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			conn net.Conn
			err  error
		}
		ch := make(chan result, 1)
		go func() {
			// The thread stays locked: it exits with this goroutine
			// rather than go back to the scheduler in another namespace.
			runtime.LockOSThread()
			f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", c.anchor))
			if err != nil {
				ch <- result{nil, err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{nil, fmt.Errorf("setns: %w", err)}
				return
			}
			conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			ch <- result{conn, err}
		}()
		r := <-ch
		return r.conn, r.err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	resp, err := client.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", u, resp.Status, b)
	}
	return b, err
}

// ------------------------------------------------------------ the agent

type agentPod struct {
	pod, ip, image string
	pid            int
}

// clusterExes are the executables of the cluster's processes and pods:
// what a node runs, without the rest of a machine shared with other work.
var clusterExes = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
	"containerd", "containerd-shim-runc-v2", "jaeger", "pause", "labapp"}

// applyAgent applies deploy/daemonset.yaml as it is, but for the OTLP
// endpoint's host (the ConfigMap, pointed at the Jaeger on the node's
// address, same scheme and port) and the scope TT_E2E_K8S_SCOPE asks for:
// node (the default: every Go process of the machine, hostPID), cluster
// (--include-exe of the cluster's own executables) or namespace
// (--include-namespace of the workload), for machines shared with other
// work.
func (c *cluster) applyAgent() agentPod {
	c.t.Helper()
	objs, err := deploy.Objects()
	if err != nil {
		c.t.Fatal(err)
	}
	items := make([]json.RawMessage, 0, len(objs))
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			ep, ok := o.Data["OTEL_EXPORTER_OTLP_ENDPOINT"]
			if !ok {
				c.t.Fatal("the manifest's ConfigMap has no OTEL_EXPORTER_OTLP_ENDPOINT")
			}
			u, err := url.Parse(ep)
			if err != nil || u.Port() == "" {
				c.t.Fatalf("the manifest's OTLP endpoint %q: want scheme://host:port (%v)", ep, err)
			}
			u.Host = net.JoinHostPort(nodeIP, u.Port())
			o.Data["OTEL_EXPORTER_OTLP_ENDPOINT"] = u.String()
			c.t.Logf("OTLP endpoint %s (the manifest's %s)", u, ep)
		case *appsv1.DaemonSet:
			ctr := &o.Spec.Template.Spec.Containers[0]
			switch scope := os.Getenv("TT_E2E_K8S_SCOPE"); scope {
			case "namespace":
				ctr.Command = append(ctr.Command, "--include-namespace="+workNS)
				c.t.Logf("scope: pods of namespace %s only (TT_E2E_K8S_SCOPE=namespace)", workNS)
			case "cluster":
				ctr.Command = append(ctr.Command, "--include-exe="+strings.Join(clusterExes, ","))
				c.t.Logf("scope: the cluster's own processes and pods, %v (TT_E2E_K8S_SCOPE=cluster)", clusterExes)
			case "", "node":
				c.t.Logf("scope: every Go process of the machine, as on a real node")
			default:
				c.t.Fatalf("TT_E2E_K8S_SCOPE=%q: want node (default), cluster or namespace", scope)
			}
		}
		b, err := json.Marshal(o)
		if err != nil {
			c.t.Fatal(err)
		}
		items = append(items, b)
	}
	list, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		c.t.Fatal(err)
	}
	c.kubectlStdin(list, "apply", "-f", "-")
	if oom := c.waitAgentReady(); oom != "" {
		// Not hidden: the test fails. The limit is raised only so that the
		// other checks still run; checkMemory then logs what it needed.
		c.t.Errorf("the agent is OOM-killed under the manifest's memory limit: %s; raising the limit to %s for the other checks", oom, raisedLimit)
		c.kubectl("-n", agentNS, "set", "resources", "ds/"+agentDS, "--limits=memory="+raisedLimit)
		c.kubectl("-n", agentNS, "rollout", "status", "ds/"+agentDS, "--timeout=180s")
	}
	return c.agent()
}

// raisedLimit is the memory limit the agent gets when the manifest's is
// too small for it, to measure what it needs.
const raisedLimit = "3Gi"

// waitAgentReady waits for the agent's rollout; it returns a description
// of the first OOM kill, if the container was killed instead.
func (c *cluster) waitAgentReady() string {
	c.t.Helper()
	const settle = 20 * time.Second
	start := time.Now()
	var readySince time.Time
	for deadline := start.Add(180 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		out := c.kubectlQuiet("-n", agentNS, "get", "pods", "-l", "app.kubernetes.io/name=timeout-tracer", "-o",
			`jsonpath={range .items[*]}{.status.containerStatuses[0].ready} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].lastState.terminated.reason} {.status.containerStatuses[0].lastState.terminated.startedAt} {.status.containerStatuses[0].lastState.terminated.finishedAt} {.spec.containers[0].resources.limits.memory}{"\n"}{end}`)
		f := strings.Fields(out)
		if len(f) >= 3 && f[2] == "OOMKilled" {
			lived := "?"
			if len(f) >= 5 {
				a, err1 := time.Parse(time.RFC3339, f[3])
				b, err2 := time.Parse(time.RFC3339, f[4])
				if err1 == nil && err2 == nil {
					lived = b.Sub(a).String()
				}
			}
			return fmt.Sprintf("limit %s, OOMKilled %s after its start (restarts %s, %s after the apply)", f[len(f)-1], lived, f[1], time.Since(start).Round(time.Second))
		}
		// Ready, and still alive a while later: the agent attaches the
		// node's processes in its first seconds (OOM kills came 5-10 s
		// after the start here).
		if len(f) >= 2 && f[0] == "true" && f[1] == "0" {
			if readySince.IsZero() {
				readySince = time.Now()
			}
			if time.Since(readySince) > settle {
				return ""
			}
		} else {
			readySince = time.Time{}
		}
	}
	c.t.Fatalf("the agent is not ready 180 s after the apply:\n%s", c.kubectlQuiet("-n", agentNS, "describe", "pods"))
	return ""
}

// agent finds the DaemonSet's one pod, ready, and its process.
func (c *cluster) agent() agentPod {
	c.t.Helper()
	sel := "app.kubernetes.io/name=timeout-tracer"
	var a agentPod
	c.waitFor(c.t, "one ready agent pod", 120*time.Second, func() bool {
		out := c.kubectlQuiet("-n", agentNS, "get", "pods", "-l", sel, "-o",
			`jsonpath={range .items[?(@.metadata.deletionTimestamp)]}deleting {end}{range .items[*]}{.metadata.name} {.status.podIP} {.status.containerStatuses[0].ready}{"\n"}{end}`)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if strings.HasPrefix(out, "deleting") || len(lines) != 1 {
			return false
		}
		f := strings.Fields(lines[0])
		if len(f) != 3 || f[2] != "true" {
			return false
		}
		a.pod, a.ip = f[0], f[1]
		return true
	})
	a.image = c.kubectl("-n", agentNS, "get", "pod", a.pod, "-o", "jsonpath={.spec.containers[0].image}")
	a.pid = c.containerPID(agentNS, a.pod)
	return a
}

// agentLog is the current agent pod's whole log: stdout (JSON reports)
// and stderr (JSON log lines).
func (c *cluster) agentLog() string {
	return c.kubectlQuiet("-n", agentNS, "logs", "ds/"+agentDS, "--tail=-1")
}

// waitTraced waits for a client pod to run and for the agent to trace its
// process.
func (c *cluster) waitTraced(t *testing.T, pod string) {
	t.Helper()
	c.kubectl("-n", workNS, "wait", "--for=condition=Ready", "pod/"+pod, "--timeout=120s")
	pid := c.containerPID(workNS, pod)
	start := time.Now()
	c.waitLog(t, fmt.Sprintf("the agent tracing %s (PID %d)", pod, pid), 120*time.Second, func(l map[string]any) bool {
		return l["msg"] == "tracing process" && fmt.Sprint(l["pid"]) == strconv.Itoa(pid)
	})
	t.Logf("%s (PID %d) traced %s after it was ready", pod, pid, time.Since(start).Round(100*time.Millisecond))
}

// saveAgentLog keeps the agent's log with the cluster's (DIR/logs).
func (c *cluster) saveAgentLog(a agentPod) {
	os.WriteFile(filepath.Join(c.dir, "logs", "agent-"+a.pod+".log"), []byte(c.agentLog()), 0o644)
}

// logLines parses the agent's log; lines that are not JSON are skipped.
func (c *cluster) logLines() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(c.agentLog()))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func (c *cluster) waitLog(t *testing.T, what string, d time.Duration, match func(map[string]any) bool) {
	t.Helper()
	c.waitFor(t, what, d, func() bool {
		return slices.ContainsFunc(c.logLines(), match)
	})
}

// reports are the agent's timeout reports for a pod of the workload
// namespace.
func (c *cluster) reports(pod string) []export.TimeoutJSON {
	var out []export.TimeoutJSON
	sc := bufio.NewScanner(strings.NewReader(c.agentLog()))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r export.TimeoutJSON
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Kind != "timeout" || r.Cause == nil {
			continue
		}
		if r.PodName == pod && r.PodNamespace == workNS {
			out = append(out, r)
		}
	}
	return out
}

// waitReports waits for at least n reports naming pod, and returns them.
func (c *cluster) waitReports(t *testing.T, pod string, n int, d time.Duration) []export.TimeoutJSON {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(time.Second) {
		rs := c.reports(pod)
		if len(rs) >= n {
			// Reports of the last timeouts may follow by a moment.
			time.Sleep(2 * time.Second)
			return c.reports(pod)
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: after %s, %d reports naming pod %s/%s, want %d (classes %v); the pod's phase is %s",
				pod, d, len(rs), workNS, pod, n, countClasses(rs), phase(c, pod))
			return rs
		}
	}
}

func countClasses(rs []export.TimeoutJSON) map[string]int {
	m := map[string]int{}
	for _, r := range rs {
		m[string(r.Cause.Class)]++
	}
	return m
}

func firstOf(rs []export.TimeoutJSON, class string) *export.TimeoutJSON {
	for i := range rs {
		if string(rs[i].Cause.Class) == class {
			return &rs[i]
		}
	}
	return nil
}

// ------------------------------------------------------------ checks

// capNames are the kernel's capability numbers.
var capNames = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
	"LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
	"WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

func capMask(names []string) (uint64, error) {
	var m uint64
	for _, n := range names {
		i := slices.Index(capNames, strings.TrimPrefix(n, "CAP_"))
		if i < 0 {
			return 0, fmt.Errorf("unknown capability %q", n)
		}
		m |= 1 << i
	}
	return m, nil
}

func capList(m uint64) []string {
	var out []string
	for i, n := range capNames {
		if m&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// checkCapabilities: the agent's process holds exactly the manifest's
// capabilities (effective, permitted, bounding), less those the node's
// root lacks (runcwrap dropped them, and says so), under no_new_privs and
// the runtime's seccomp filter.
func (c *cluster) checkCapabilities(t *testing.T, a agentPod) {
	added, err := deploy.Capabilities()
	if err != nil {
		t.Fatal(err)
	}
	want, err := capMask(added)
	if err != nil {
		t.Fatal(err)
	}
	self := procStatus(t, os.Getpid())
	bnd, err := strconv.ParseUint(self["CapBnd"], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	if lack := want &^ bnd; lack != 0 {
		t.Logf("this machine's root lacks %v (bounding set %016x): runcwrap dropped it; a real node grants it", capList(lack), bnd)
		want &= bnd
	}
	st := procStatus(t, a.pid)
	for _, k := range []string{"CapEff", "CapPrm", "CapBnd"} {
		got, err := strconv.ParseUint(st[k], 16, 64)
		if err != nil {
			t.Fatalf("%s of PID %d: %q", k, a.pid, st[k])
		}
		if got != want {
			t.Errorf("agent %s = %016x %v, want %016x %v (the manifest's %v)", k, got, capList(got), want, capList(want), added)
		}
	}
	for k, v := range map[string]string{"CapInh": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if st[k] != v {
			t.Errorf("agent %s = %s, want %s", k, st[k], v)
		}
	}
	t.Logf("agent PID %d: CapEff %s %v, CapBnd %s, NoNewPrivs %s, Seccomp %s (filters %s)",
		a.pid, st["CapEff"], capList(mustHex(st["CapEff"])), st["CapBnd"], st["NoNewPrivs"], st["Seccomp"], st["Seccomp_filters"])
}

func mustHex(s string) uint64 {
	v, _ := strconv.ParseUint(s, 16, 64)
	return v
}

// checkMetrics scrapes the agent's /metrics from the node, as Prometheus
// would: the timeouts of both phases are counted by class.
func (c *cluster) checkMetrics(t *testing.T, a agentPod) {
	b, err := c.httpGet("http://" + net.JoinHostPort(a.ip, "9464") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	byCause := map[string]float64{}
	var series []string
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || name != "timeout_tracer_context_endings_total" {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		v, _ := strconv.ParseFloat(strings.TrimSpace(value), 64)
		series = append(series, line)
		for _, l := range strings.Split(labels, ",") {
			if k, val, ok := strings.Cut(l, "="); ok && k == "cause" {
				byCause[strings.Trim(val, `"`)] += v
			}
		}
		// Identity labels, where the daemon has them, name the workload's
		// namespace and nothing outside it (scope: its pods only).
		if strings.Contains(labels, "namespace=") && os.Getenv("TT_E2E_K8S_SCOPE") == "namespace" && !strings.Contains(labels, `namespace="`+workNS+`"`) {
			t.Errorf("a series of another namespace: %s", line)
		}
	}
	t.Logf("timeout_tracer_context_endings_total: %d series, by cause %v", len(series), byCause)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "timeout_tracer_tcp_socket_table_total{") || strings.HasPrefix(line, "timeout_tracer_ringbuffer_lost_events_total{") {
			t.Logf("%s", line)
		}
	}
	for _, k := range []string{"slow_peer", "rto"} {
		if byCause[k] == 0 {
			t.Errorf("/metrics counts no %s timeout:\n%s", k, strings.Join(series, "\n"))
		}
	}
	if !strings.Contains(string(b), "namespace=\""+workNS+"\"") {
		t.Errorf("no series of /metrics has the workload's namespace label %q", workNS)
	}
	// The real scrape is clean by Prometheus's own linter.
	problems, err := promlint.New(bytes.NewReader(b)).Lint()
	if err != nil {
		t.Errorf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	c.checkDashboard(t, b)
}

// dashboardOptional are metrics the dashboard queries that this e2e's
// daemon has no series of, and why: the manifest runs without --audit, and
// the others count what did not happen here.
var dashboardOptional = map[string]string{
	"timeout_tracer_call_deadline_remaining_seconds": "needs --audit",
	"timeout_tracer_calls_without_deadline_total":    "needs --audit",
	"timeout_tracer_hung_calls_total":                "needs --audit",
	"timeout_tracer_label_overflow_total":            "no label overflowed",
	"timeout_tracer_tcp_events_suppressed_total":     "no event was rate-limited",
	"timeout_tracer_tcp_resets_total":                "no reset",
	"timeout_tracer_tcp_connect_failures_total":      "no connect failed or was aborted (net/http lets a cancelled request's dial go on)",
}

// checkDashboard: every metric the shipped Grafana dashboard queries has a
// family in the real scrape, but for dashboardOptional's, which are only
// noted when absent.
func (c *cluster) checkDashboard(t *testing.T, scrape []byte) {
	dash, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "timeout-tracer.json"))
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]bool{}
	for _, line := range strings.Split(string(scrape), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			families[f[2]] = true
		}
	}
	seen := map[string]bool{}
	for _, name := range regexp.MustCompile(`timeout_tracer_[a-z_]+`).FindAllString(string(dash), -1) {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if s, ok := strings.CutSuffix(name, suffix); ok && (families[s] || dashboardOptional[s] != "") {
				base = s
			}
		}
		if seen[base] {
			continue
		}
		seen[base] = true
		switch why, optional := dashboardOptional[base]; {
		case families[base]:
		case optional:
			t.Logf("dashboard: %s has no series here (%s)", base, why)
		default:
			t.Errorf("the dashboard queries %s, which the daemon's scrape does not have", base)
		}
	}
	t.Logf("dashboard: %d metrics queried, checked against the scrape", len(seen))
}

// checkJaeger: the reports' spans reached the Jaeger on the node through
// the manifest's OTLP settings.
func (c *cluster) checkJaeger(t *testing.T, rs []export.TimeoutJSON) {
	var ids []string
	for _, r := range rs {
		if r.TraceID != "" {
			ids = append(ids, r.TraceID)
		}
	}
	if len(ids) == 0 {
		t.Fatalf("no report has a trace ID (of %d)", len(rs))
	}
	found, tagged := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range ids {
		for {
			b, err := c.httpGet(jaegerQuery + "/api/traces/" + id)
			if err == nil {
				found++
				if bytes.Contains(b, []byte(workNS)) {
					tagged++
				}
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		if found >= 5 || time.Now().After(deadline) {
			break
		}
	}
	svc, _ := c.httpGet(jaegerQuery + "/api/services")
	t.Logf("Jaeger: %d of the first %d trace IDs found, %d of them name namespace %s; services %s", found, min(len(ids), 5), tagged, workNS, bytes.TrimSpace(svc))
	if found == 0 {
		t.Errorf("none of the reports' traces reached Jaeger (%d trace IDs; agent log lines about OTLP: %v)", len(ids), c.grepLog("otlp", "OTLP", "export"))
	} else if tagged == 0 {
		t.Errorf("the traces in Jaeger do not name the pod's namespace %s", workNS)
	}
}

func (c *cluster) grepLog(words ...string) []string {
	var out []string
	for _, line := range strings.Split(c.agentLog(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
			for _, w := range words {
				if strings.Contains(line, w) {
					out = append(out, line)
					break
				}
			}
		}
	}
	if len(out) > 5 {
		out = out[len(out)-5:]
	}
	return out
}

// checkLog: no RBAC refusal, nothing at ERROR.
func (c *cluster) checkLog(t *testing.T) {
	for _, m := range c.logLines() {
		line, _ := json.Marshal(m)
		s := string(line)
		for _, w := range []string{"forbidden", "Forbidden", "Unauthorized", "cannot list", "cannot watch"} {
			if strings.Contains(s, w) {
				t.Errorf("RBAC refusal in the agent's log: %s", s)
				break
			}
		}
		if m["level"] == "ERROR" {
			t.Errorf("error in the agent's log: %s", s)
		}
	}
}

// checkMemory: the agent stayed inside its memory limit: never OOM-killed
// or restarted, peak usage of its cgroup below the limit. The figures are
// logged.
func (c *cluster) checkMemory(t *testing.T, a agentPod) {
	restarts := c.kubectl("-n", agentNS, "get", "pod", a.pod, "-o", "jsonpath={.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].lastState.terminated.reason} {.spec.containers[0].resources.limits.memory}")
	if f := strings.Fields(restarts); len(f) > 0 && f[0] != "0" {
		t.Errorf("the agent restarted during the test: restarts, last reason, limit: %q", restarts)
		a.pid = c.containerPID(agentNS, a.pod) // the current container's
	}
	st := procStatus(t, a.pid)
	cg := memoryCgroup(t, a.pid)
	read := func(f string) string {
		b, _ := os.ReadFile(filepath.Join(cg, f))
		return strings.TrimSpace(string(b))
	}
	limit, _ := strconv.ParseUint(read("memory.limit_in_bytes"), 10, 64)
	peak, _ := strconv.ParseUint(read("memory.max_usage_in_bytes"), 10, 64)
	oomKills := ""
	for _, line := range strings.Split(read("memory.oom_control"), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			oomKills = v
		}
	}
	traced := 0
	for _, m := range c.logLines() {
		if m["msg"] == "tracing process" {
			traced++
		}
	}
	t.Logf("agent memory: VmRSS %s, VmHWM %s; cgroup peak %.1f MiB of limit %.0f MiB (failcnt %s, oom_kill %s); restarts %q; %d processes traced so far",
		st["VmRSS"], st["VmHWM"], float64(peak)/(1<<20), float64(limit)/(1<<20), read("memory.failcnt"), oomKills, restarts, traced)
	if oomKills != "" && oomKills != "0" {
		t.Errorf("the agent's cgroup saw %s OOM kills", oomKills)
	}
	if limit == 0 || peak >= limit {
		t.Errorf("cgroup %s: peak %d bytes, limit %d", cg, peak, limit)
	}
}

func memoryCgroup(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "memory") {
			return filepath.Join("/sys/fs/cgroup/memory", f[2])
		}
	}
	t.Fatalf("PID %d has no memory cgroup (v1) in %s", pid, b)
	return ""
}

// bpfObject is a BPF program, link or map a process holds a descriptor of.
type bpfObject struct{ kind, id string }

// bpfObjects lists the BPF objects the process holds, from its fdinfo.
func bpfObjects(t *testing.T, pid int) []bpfObject {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fdinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[bpfObject]bool{}
	var out []bpfObject
	for _, fd := range fds {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			var o bpfObject
			switch strings.TrimSpace(k) {
			case "prog_id":
				o = bpfObject{"prog", strings.TrimSpace(v)}
			case "link_id":
				o = bpfObject{"link", strings.TrimSpace(v)}
			case "map_id":
				o = bpfObject{"map", strings.TrimSpace(v)}
			default:
				continue
			}
			if !seen[o] {
				seen[o] = true
				out = append(out, o)
			}
			break // a link's fdinfo names its program too: the link holds it
		}
	}
	n := map[string]int{}
	for _, o := range out {
		n[o.kind]++
	}
	if n["prog"]+n["link"] == 0 {
		t.Fatalf("the agent (PID %d) holds no BPF program or link: nothing attached?", pid)
	}
	t.Logf("agent PID %d holds %d links, %d programs, %d maps", pid, n["link"], n["prog"], n["map"])
	return out
}

// checkGone: every BPF object the agent held is gone from the kernel.
func checkGone(t *testing.T, objs []bpfObject) {
	for _, o := range objs {
		out, err := exec.Command("bpftool", o.kind, "show", "id", o.id).CombinedOutput()
		if err == nil {
			t.Errorf("%s %s is still in the kernel after the agent exited: %s", o.kind, o.id, bytes.TrimSpace(out))
		}
	}
}

func (c *cluster) waitGone(t *testing.T, pid int) {
	t.Helper()
	c.waitFor(t, fmt.Sprintf("agent PID %d to exit", pid), 60*time.Second, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return err != nil
	})
	// The kernel frees BPF objects after an RCU grace period.
	time.Sleep(time.Second)
}

func listDir(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err == nil && p != dir {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ------------------------------------------------------------ the workload

func workloadYAML() []byte {
	return []byte(`apiVersion: v1
kind: Namespace
metadata:
  name: ` + workNS + `
  labels: {tt-e2e: "1"}
---
apiVersion: v1
kind: Pod
metadata:
  name: server
  namespace: ` + workNS + `
  labels: {app: server}
spec:
  containers:
  - name: server
    image: ` + labappImage + `
    imagePullPolicy: Never
    args: [http-server, -addr, ":8080", -delay, 300ms]
`)
}

// clientYAML is a labapp client pod against the server.
func clientYAML(name, serverIP string, args ...string) []byte {
	all := append([]string{"client", "-target", net.JoinHostPort(serverIP, "8080"), "-span", "before"}, args...)
	quoted := make([]string, len(all))
	for i, a := range all {
		quoted[i] = strconv.Quote(a)
	}
	return []byte(`apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: ` + workNS + `
  labels: {app: ` + name + `}
spec:
  restartPolicy: Never
  containers:
  - name: client
    image: ` + labappImage + `
    imagePullPolicy: Never
    args: [` + strings.Join(quoted, ", ") + `]
`)
}
