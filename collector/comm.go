package collector

import (
	"fmt"
	"os"
	"strings"
)

// Comm is process pid's command name (/proc/PID/comm), "" when unknown.
func Comm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}
