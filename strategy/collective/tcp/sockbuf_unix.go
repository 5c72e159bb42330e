//go:build unix

package tcp

import (
	"net"
	"syscall"
)

// sendBuffer is c's kernel send buffer in bytes as the kernel reports it
// (Linux: twice what was asked, within its limit), 0 when unknown.
func sendBuffer(c net.Conn) int {
	if n, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = n.NetConn()
	}
	t, ok := c.(*net.TCPConn)
	if !ok {
		return 0
	}
	rc, err := t.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	rc.Control(func(fd uintptr) {
		if v, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF); err == nil {
			n = v
		}
	})
	return n
}
