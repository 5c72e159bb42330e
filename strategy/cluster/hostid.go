package cluster

import (
	"os"
	"strings"
)

// HostID identifies the machine this process runs on, as the ranks of a
// job compare them: equal strings mean ranks on one machine, which may
// share memory (the shm backend) and each other's files. It is the host
// name and the kernel's boot id, so that two containers with the same
// name on different machines differ, and, on Linux, the network namespace
// and the /dev/shm this process sees: two network namespaces of one kernel
// (deploy/netns's nodes, containers with networks of their own) are two
// machines to a job, as they are meant to be, and two /dev/shm mounts
// (containers with an IPC namespace and a /dev/shm of their own) cannot
// carry shared memory between them. HostName reads the name back.
func HostID() string {
	name, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return hostID(name, strings.TrimSpace(string(boot)), namespaces())
}

// hostID joins the parts of a HostID: name/boot, then /ns when the
// platform gives the namespaces ("" elsewhere).
func hostID(name, boot, ns string) string {
	id := name + "/" + boot
	if ns != "" {
		id += "/" + ns
	}
	return id
}

// HostName is the host name part of a HostID.
func HostName(id string) string {
	name, _, _ := strings.Cut(id, "/")
	return name
}
