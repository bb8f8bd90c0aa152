package netlab

import (
	"fmt"
	"math"
	"strconv"
)

// LossAfterHandshake is Loss for segments other than connection requests:
// handshakes go through (no SYN retries, so no connect timeouts), and what
// is lost is data and ACKs. Mild loss on a bulk upload makes the client
// retransmit in fast recovery.
func (p *Pair) LossAfterHandshake(port int, probability float64) error {
	if !(probability > 0 && probability <= 1) || math.IsNaN(probability) {
		return fmt.Errorf("add loss rule for port %d: probability %v is not in (0, 1]", port, probability)
	}
	return p.addRule("loss after handshake", port, "!", "--syn", "-m", "statistic", "--mode", "random",
		"--probability", strconv.FormatFloat(probability, 'f', -1, 64), "-j", "DROP")
}
