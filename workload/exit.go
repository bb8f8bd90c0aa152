package workload

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// WatchExit checks that process pid exists and returns a channel closed
// when it exits (pidfd: no polling, no PID reuse race).
func WatchExit(pid int) (<-chan struct{}, error) {
	if pid < 0 {
		return nil, fmt.Errorf("invalid pid %d", pid)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("process %d does not exist", pid)
	}
	if err != nil {
		if _, serr := os.Stat(fmt.Sprintf("/proc/%d", pid)); serr != nil {
			return nil, fmt.Errorf("process %d does not exist", pid)
		}
		return nil, fmt.Errorf("watch process %d: %w", pid, err)
	}
	done := make(chan struct{})
	go func() {
		defer unix.Close(fd)
		defer close(done)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				return
			}
		}
	}()
	return done, nil
}
