package workload

import (
	"fmt"
	"strings"
)

// Cgroups is a parsed /proc/PID/cgroup.
type Cgroups struct {
	// V2 is the path of the unified hierarchy ("0::PATH"); empty if none.
	V2 string
	// V1 maps each v1 controller (cpu, cpuacct, memory, pids,
	// name=systemd, ...) to its path. A line "4:cpu,cpuacct:/x" gives both
	// "cpu" and "cpuacct".
	V1 map[string]string
}

// ParseCgroupFile parses the text of /proc/PID/cgroup: lines
// "ID:CONTROLLERS:PATH", where ID 0 with no controllers is cgroup v2 and
// the others are v1 hierarchies (both kinds on a hybrid host).
func ParseCgroupFile(text string) (Cgroups, error) {
	var c Cgroups
	for n, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		// The path may contain ':', so split into three at most.
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			return Cgroups{}, fmt.Errorf("line %d %q: want ID:CONTROLLERS:/PATH", n+1, line)
		}
		if f[0] == "0" && f[1] == "" {
			c.V2 = f[2]
			continue
		}
		if c.V1 == nil {
			c.V1 = make(map[string]string)
		}
		for _, ctl := range strings.Split(f[1], ",") {
			c.V1[ctl] = f[2]
		}
	}
	return c, nil
}

// v1Preference is the order in which v1 controllers are consulted: those a
// container runtime always places its containers in.
var v1Preference = []string{"cpu", "memory", "pids"}

// V1Path is the v1 path of the cpu controller, else memory, else pids;
// empty when none is mounted.
func (c Cgroups) V1Path() string {
	for _, ctl := range v1Preference {
		if p, ok := c.V1[ctl]; ok {
			return p
		}
	}
	return ""
}

// Container identifies the container and pod from the v2 path, else from
// the v1 paths of the cpu, memory and pids controllers, in that order: on a
// hybrid host the runtime may use only the v1 hierarchies.
func (c Cgroups) Container() Container {
	if ct := ParseContainer(c.V2); ct != (Container{}) {
		return ct
	}
	for _, ctl := range v1Preference {
		if ct := ParseContainer(c.V1[ctl]); ct != (Container{}) {
			return ct
		}
	}
	return Container{}
}

// Runtime names the container runtime a cgroup path shows. The cgroupfs
// driver names containers by bare ID under Kubernetes, which does not tell
// containerd from Docker: then Runtime is empty and ContainerID is still set.
type Runtime string

// The runtimes recognised from cgroup names.
const (
	RuntimeContainerd Runtime = "containerd"
	RuntimeCRIO       Runtime = "cri-o"
	RuntimeDocker     Runtime = "docker"
	RuntimePodman     Runtime = "podman"
)

// QoS is the Kubernetes QoS class of a pod, from its cgroup parent.
type QoS string

// The QoS classes, as Kubernetes spells them.
const (
	QoSGuaranteed QoS = "Guaranteed"
	QoSBurstable  QoS = "Burstable"
	QoSBestEffort QoS = "BestEffort"
)

// Container is the container and pod a cgroup path belongs to. The zero
// value means "not in a recognised container".
type Container struct {
	Runtime     Runtime
	ContainerID string // 64 lowercase hex digits (OTel container.id)
	PodUID      string // e.g. 2f4c2b8e-1d7a-4f7e-9b1e-0c3f5e6a7b8c (OTel k8s.pod.uid); a static pod: 32 hex digits
	QoS         QoS    // set when PodUID is
}

// runtimePrefixes are the systemd scope (or cgroupfs directory) prefixes
// of container cgroups, by runtime: "cri-containerd-<id>.scope",
// "crio-<id>.scope" (cgroupfs: "crio-<id>"), "docker-<id>.scope",
// "libpod-<id>.scope".
var runtimePrefixes = []struct {
	prefix string
	rt     Runtime
}{
	{"cri-containerd-", RuntimeContainerd},
	{"crio-", RuntimeCRIO},
	{"docker-", RuntimeDocker},
	{"libpod-", RuntimePodman},
}

// ParseContainer finds the container and pod in a cgroup path. It knows
// the layouts of containerd, CRI-O and Docker under Kubernetes with the
// systemd cgroup driver
//
//	/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
//	.../crio-<id>.scope, .../docker-<id>.scope
//
// and the cgroupfs driver
//
//	/kubepods/burstable/pod<uid>/<id>, /kubepods/pod<uid>/crio-<id>
//
// plain Docker (/system.slice/docker-<id>.scope, /docker/<id>), Podman
// (libpod-<id>.scope), and all of these nested deeper (kind, k3s, Docker in
// Docker: the innermost container wins) or seen from inside a cgroup
// namespace, where the path starts with "/../..". CRI-O's conmon
// ("crio-conmon-<id>.scope") is not the container and yields no ID.
func ParseContainer(path string) Container {
	var c Container
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if uid, qos, ok := podComponent(p, parts[:i]); ok {
			c = Container{PodUID: uid, QoS: qos}
			continue
		}
		if rt, id, ok := containerComponent(p, parts[:i], c.PodUID != ""); ok {
			c.Runtime, c.ContainerID = rt, id
		}
	}
	return c
}

// podComponent recognises "kubepods-burstable-pod<uid_>.slice" (systemd
// driver: '-' in the UID escaped as '_') and "pod<uid>" under a kubepods
// parent (cgroupfs driver).
func podComponent(p string, parents []string) (uid string, qos QoS, ok bool) {
	if name, isSlice := strings.CutSuffix(p, ".slice"); isSlice {
		i := strings.LastIndex(name, "-pod")
		if i < 0 || !strings.Contains(name[:i], "kubepods") {
			return "", "", false
		}
		uid = strings.ReplaceAll(name[i+len("-pod"):], "_", "-")
		if !isUID(uid) {
			return "", "", false
		}
		return uid, qosOf(name[:i]), true
	}
	uid, found := strings.CutPrefix(p, "pod")
	if !found || !isUID(uid) {
		return "", "", false
	}
	qos = QoSGuaranteed
	for _, parent := range parents {
		if q := qosOf(parent); q != QoSGuaranteed {
			qos = q
		}
	}
	return uid, qos, true
}

// qosOf reads the QoS class from a pod's parent name: "burstable" and
// "besteffort" (in "kubepods-burstable" or as the cgroupfs directory
// "burstable"); Guaranteed pods sit directly under kubepods.
func qosOf(s string) QoS {
	switch {
	case strings.Contains(s, "besteffort"):
		return QoSBestEffort
	case strings.Contains(s, "burstable"):
		return QoSBurstable
	}
	return QoSGuaranteed
}

// containerComponent recognises a container's cgroup: a runtime-prefixed
// scope, or a bare 64-hex ID under a pod (runtime unknown) or under
// "docker" (cgroupfs driver of plain Docker).
func containerComponent(p string, parents []string, inPod bool) (Runtime, string, bool) {
	name := strings.TrimSuffix(p, ".scope")
	for _, rp := range runtimePrefixes {
		if id, ok := strings.CutPrefix(name, rp.prefix); ok && isContainerID(id) {
			return rp.rt, id, true
		}
	}
	if !isContainerID(p) {
		return "", "", false
	}
	if inPod {
		return "", p, true
	}
	if len(parents) > 0 && parents[len(parents)-1] == "docker" {
		return RuntimeDocker, p, true
	}
	return "", "", false
}

// isContainerID: 64 lowercase hex digits.
func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

// isUID: a Kubernetes pod UID as the kubelet names the pod's cgroup:
// 8-4-4-4-12 hex digits, or 32 hex digits for a static pod (the hash of its
// manifest; its mirror pod in the API carries it in the
// kubernetes.io/config.mirror annotation).
func isUID(s string) bool {
	if len(s) == 32 {
		return strings.TrimLeft(s, "0123456789abcdef") == ""
	}
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i]) {
				return false
			}
		}
	}
	return true
}

func isHex(b byte) bool { return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' }
