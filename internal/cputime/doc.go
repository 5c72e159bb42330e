// Package cputime reads the CPU time this process has used, for
// benchmarks on shared machines: a step's CPU time moves far less with the
// other load than its wall time. It imports only the standard library.
package cputime
