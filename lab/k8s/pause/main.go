// Command pause is the sandbox ("pause") container of the end-to-end
// test's cluster (lab/k8s): it holds a pod's namespaces until it is told
// to stop. No registry is reachable, so the upstream image cannot be
// pulled; this one is built from source and imported like the others.
// As the pod's PID 1 in a shared PID namespace it also reaps orphans.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
