package workload

import (
	"strings"
	"testing"
)

const (
	cid  = "4c1f0bd3e7a2f1a8c0d9e6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5"
	cid2 = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f54c1f0bd3e7a2f1a8"
	uid  = "2f4c2b8e-1d7a-4f7e-9b1e-0c3f5e6a7b8c"
	uidU = "2f4c2b8e_1d7a_4f7e_9b1e_0c3f5e6a7b8c" // systemd escapes '-' as '_'
)

// Lines as /proc/PID/cgroup shows them on nodes of each layout.
func TestParseContainer(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string
		want Container
	}{
		{"containerd systemd burstable",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			Container{RuntimeContainerd, cid, uid, QoSBurstable}},
		{"containerd systemd besteffort",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			Container{RuntimeContainerd, cid, uid, QoSBestEffort}},
		{"containerd systemd guaranteed",
			"/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			Container{RuntimeContainerd, cid, uid, QoSGuaranteed}},
		{"cri-o systemd",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-" + cid + ".scope",
			Container{RuntimeCRIO, cid, uid, QoSBurstable}},
		{"cri-o systemd, nested container cgroup",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-" + cid + ".scope/container",
			Container{RuntimeCRIO, cid, uid, QoSBurstable}},
		{"cri-o conmon is not the container",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope",
			Container{PodUID: uid, QoS: QoSBurstable}},
		{"docker (dockershim) systemd",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/docker-" + cid + ".scope",
			Container{RuntimeDocker, cid, uid, QoSBestEffort}},
		{"cgroupfs burstable, bare id",
			"/kubepods/burstable/pod" + uid + "/" + cid,
			Container{"", cid, uid, QoSBurstable}},
		{"cgroupfs guaranteed, bare id",
			"/kubepods/pod" + uid + "/" + cid,
			Container{"", cid, uid, QoSGuaranteed}},
		{"cgroupfs besteffort cri-o",
			"/kubepods/besteffort/pod" + uid + "/crio-" + cid,
			Container{RuntimeCRIO, cid, uid, QoSBestEffort}},
		{"static pod: uid is the manifest hash",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8f3c2a1b9d7e6f5a4b3c2d1e0f9a8b7c.slice/cri-containerd-" + cid + ".scope",
			Container{RuntimeContainerd, cid, "8f3c2a1b9d7e6f5a4b3c2d1e0f9a8b7c", QoSBurstable}},
		{"pod cgroup itself, no container",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice",
			Container{PodUID: uid, QoS: QoSBurstable}},
		{"plain docker cgroupfs", "/docker/" + cid, Container{Runtime: RuntimeDocker, ContainerID: cid}},
		{"plain docker systemd", "/system.slice/docker-" + cid + ".scope", Container{Runtime: RuntimeDocker, ContainerID: cid}},
		{"docker in docker: innermost", "/docker/" + cid2 + "/docker/" + cid, Container{Runtime: RuntimeDocker, ContainerID: cid}},
		{"podman", "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + cid + ".scope", Container{Runtime: RuntimePodman, ContainerID: cid}},
		{"kind node (kubelet.slice)",
			"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			Container{RuntimeContainerd, cid, uid, QoSBestEffort}},
		{"k3s cgroupfs", "/kubepods/besteffort/pod" + uid + "/" + cid, Container{"", cid, uid, QoSBestEffort}},
		{"seen from a cgroup namespace",
			"/../../kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			Container{RuntimeContainerd, cid, uid, QoSBestEffort}},
		{"cgroupfs seen from a cgroup namespace",
			"/../../../burstable/pod" + uid + "/" + cid,
			Container{"", cid, uid, QoSBurstable}},
		{"systemd service", "/system.slice/ssh.service", Container{}},
		{"user session", "/user.slice/user-0.slice/session-3.scope", Container{}},
		{"root", "/", Container{}},
		{"empty", "", Container{}},
		{"id too short", "/docker/" + cid[:63], Container{}},
		{"id upper case", "/docker/" + strings.ToUpper(cid), Container{}},
		{"bare hex outside pod and docker", "/" + cid, Container{}},
		{"pod uid malformed", "/kubepods/burstable/pod" + uid[:35] + "/" + cid, Container{}},
		{"slice without kubepods", "/foo.slice/foo-pod" + uidU + ".slice", Container{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseContainer(tc.path); got != tc.want {
				t.Errorf("ParseContainer(%q)\n got %+v\nwant %+v", tc.path, got, tc.want)
			}
		})
	}
}

func TestParseCgroupFile(t *testing.T) {
	pod := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope"
	for _, tc := range []struct {
		name   string
		text   string
		v2, v1 string
		want   Container
	}{
		{"v2 only", "0::" + pod + "\n", pod, "", Container{RuntimeContainerd, cid, uid, QoSBurstable}},
		{"hybrid: container in v1 only, unified at root",
			"12:pids:" + pod + "\n11:memory:" + pod + "\n4:cpu,cpuacct:" + pod + "\n1:name=systemd:" + pod + "\n0::/\n",
			"/", pod, Container{RuntimeContainerd, cid, uid, QoSBurstable}},
		{"v1 only, memory differs from cpu (as on this development machine)",
			"9:name=systemd:/\n8:pids:/\n4:memory:/process_api/27f4c78f85c8b9ead54e753d23be478a\n1:cpu:/\n",
			"", "/", Container{}},
		{"v1: memory holds the container when cpu does not",
			"4:memory:/docker/" + cid + "\n1:cpu:/\n", "", "/", Container{Runtime: RuntimeDocker, ContainerID: cid}},
		{"path with a colon", "0::/a:b\n", "/a:b", "", Container{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseCgroupFile(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if c.V2 != tc.v2 || c.V1Path() != tc.v1 || c.Container() != tc.want {
				t.Errorf("got v2 %q v1 %q %+v, want v2 %q v1 %q %+v", c.V2, c.V1Path(), c.Container(), tc.v2, tc.v1, tc.want)
			}
		})
	}
	for _, bad := range []string{"garbage\n", "0::relative\n", "1:cpu\n"} {
		if _, err := ParseCgroupFile(bad); err == nil || !strings.Contains(err.Error(), "want ID:CONTROLLERS:/PATH") {
			t.Errorf("ParseCgroupFile(%q) = %v, want a format error", bad, err)
		}
	}
}
