package callbacks

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// ReadProcessSample reads the process's CPU time (getrusage) and resident
// memory (VmRSS and VmHWM of /proc/self/status).
func ReadProcessSample() (ProcessSample, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return ProcessSample{}, fmt.Errorf("getrusage: %w", err)
	}
	s := ProcessSample{CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return s, fmt.Errorf("resident memory: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(k) {
		case "VmRSS":
			dst = &s.RSS
		case "VmHWM":
			dst = &s.PeakRSS
		default:
			continue
		}
		// "   123456 kB"
		f := bytes.Fields(v)
		if len(f) != 2 || string(f[1]) != "kB" {
			return s, fmt.Errorf("/proc/self/status: %s is %q, not \"N kB\"", k, bytes.TrimSpace(v))
		}
		n, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return s, fmt.Errorf("/proc/self/status: %s: %w", k, err)
		}
		*dst = n << 10
	}
	return s, nil
}
