// Package cputime reads the CPU time the process has used, user and system
// together, on every platform Go builds for. Benchmarks report it beside
// wall-clock rates: it leaves out the time other processes had the cores,
// so it is the steadier figure on a shared machine.
package cputime

import "time"

// Process returns the user+system CPU time of this process so far, and
// whether the platform reports it (false: the duration is 0).
func Process() (time.Duration, bool) { return process() }
