package collector

import (
	"errors"
	"sync"

	"github.com/cilium/ebpf/link"
)

// CloseLinks detaches uprobes concurrently. Each detach waits for the
// kernel's RCU grace periods (~0.1 s apiece measured here), nearly all of
// it waiting, not working: one after the other, the ~40 detail probes of a
// gRPC + net/http program took seconds, and the tracer's exit with them.
func CloseLinks(ls []link.Link) error {
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
