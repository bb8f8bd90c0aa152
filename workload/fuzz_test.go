package workload

import (
	"strings"
	"testing"
)

// FuzzParseCgroupFile: any /proc/PID/cgroup text parses or fails cleanly,
// and what it finds is well-formed: a container ID of 64 hex digits, a pod
// UID the kubelet could have written, a QoS class only with a pod.
func FuzzParseCgroupFile(f *testing.F) {
	f.Add("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n")
	f.Add("12:pids:/kubepods/besteffort/pod" + uid + "/crio-" + cid + "\n4:cpu,cpuacct:/docker/" + cid + "\n0::/\n")
	f.Add("0::/../../kubepods-pod" + uidU + ".slice/docker-" + cid + ".scope\n")
	f.Add("9:name=systemd:/\n4:memory:/process_api/27f4c78f85c8b9ead54e753d23be478a\n1:cpu:/\n")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseCgroupFile(text)
		if err != nil {
			if !strings.Contains(err.Error(), "want ID:CONTROLLERS:/PATH") {
				t.Fatalf("error without the expected format: %v", err)
			}
			return
		}
		ct := c.Container()
		if ct.ContainerID != "" && !isContainerID(ct.ContainerID) {
			t.Errorf("container ID %q is not 64 hex digits", ct.ContainerID)
		}
		if ct.PodUID != "" && !isUID(ct.PodUID) {
			t.Errorf("pod UID %q is malformed", ct.PodUID)
		}
		if (ct.QoS != "") != (ct.PodUID != "") {
			t.Errorf("QoS %q with pod UID %q", ct.QoS, ct.PodUID)
		}
		if ct.Runtime != "" && ct.ContainerID == "" {
			t.Errorf("runtime %q without a container ID", ct.Runtime)
		}
	})
}
