// Package bench holds the overhead and storm benchmarks behind `make bench`.
// They need root and print ratios measured A/B in one run (the development
// machines are shared and noisy: never compare numbers across runs), so they
// are benchmarks, not tests.
package bench
