// Package adaptive decides when to attach the costly detail probes: while a
// process is timing out, and not while it is healthy. A uprobe hit costs
// ~13 µs on the development machines; the detail tier traps on every
// deadline a process sets, so it must be on only while it pays off.
package adaptive

import (
	"fmt"
	"time"
)

// Policy says when detail is switched on and off.
type Policy struct {
	Threshold int           // expiries within Window that switch detail on
	Window    time.Duration // the sliding window for Threshold
	Quiet     time.Duration // detail goes off after this long without an expiry
}

// DefaultPolicy is the policy of the flags' defaults: 3 expiries in 10 s switch detail on; 60 s of quiet switch
// it off. A timeout storm lasts minutes: its first reports come from the
// cold tier, the rest with full detail.
func DefaultPolicy() Policy {
	return Policy{Threshold: 3, Window: 10 * time.Second, Quiet: 60 * time.Second}
}

// Validate rejects policies that cannot work.
func (p Policy) Validate() error {
	if p.Threshold < 1 || p.Window <= 0 || p.Quiet <= 0 {
		return fmt.Errorf("invalid detail policy: threshold %d, window %v, quiet %v (all must be positive)", p.Threshold, p.Window, p.Quiet)
	}
	return nil
}

// Controller applies a Policy to one process. Not safe for concurrent use.
type Controller struct {
	p      Policy
	recent []time.Time // expiries within the window, oldest first
	last   time.Time
	on     bool
}

// New returns a controller with detail off.
func New(p Policy) *Controller { return &Controller{p: p} }

// On reports whether detail should be attached.
func (c *Controller) On() bool { return c.on }

// Observe records an expiry at now and reports whether detail must be
// switched on because of it.
func (c *Controller) Observe(now time.Time) (switchOn bool) {
	c.last = now
	cut := now.Add(-c.p.Window)
	keep := c.recent[:0]
	for _, t := range c.recent {
		if t.After(cut) {
			keep = append(keep, t)
		}
	}
	c.recent = append(keep, now)
	if !c.on && len(c.recent) >= c.p.Threshold {
		c.on = true
		return true
	}
	return false
}

// Tick reports whether detail must be switched off at now because the
// process has been quiet for the policy's Quiet period.
func (c *Controller) Tick(now time.Time) (switchOff bool) {
	if c.on && now.Sub(c.last) >= c.p.Quiet {
		c.on = false
		c.recent = c.recent[:0]
		return true
	}
	return false
}
