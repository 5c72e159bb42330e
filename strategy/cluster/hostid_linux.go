package cluster

import (
	"fmt"
	"os"
	"syscall"
)

// namespaces names the network namespace of this process and the device
// of the /dev/shm it sees ("net:[4026531840],shm:23"): a link and a stat,
// no process or file created. A part that cannot be read (a sandbox that
// hides /proc) is left out, which keeps such ranks of one machine equal.
func namespaces() string {
	s := ""
	if l, err := os.Readlink("/proc/self/ns/net"); err == nil {
		s = l
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/dev/shm", &st); err == nil {
		if s != "" {
			s += ","
		}
		s += fmt.Sprintf("shm:%d", st.Dev)
	}
	return s
}
