package netlab

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// cmdTimeout bounds every helper command, so that a wedged ip or iptables fails the test
// instead of hanging it until the go test timeout.
const cmdTimeout = 30 * time.Second

// run runs a command and, on failure, returns an error that carries the command line and
// its output: ip and iptables explain what went wrong only on stderr.
func run(name string, args ...string) error {
	_, err := output(name, args...)
	return err
}

// output runs a command and returns its standard output.
func output(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		line := strings.Join(append([]string{name}, args...), " ")
		return nil, fmt.Errorf("run %q: %w: %s", line, err, bytes.TrimSpace(append(stderr.Bytes(), stdout.Bytes()...)))
	}
	return stdout.Bytes(), nil
}
