//go:build !linux

package tcp

import (
	"io"
	"net"
)

// spinning is spin_linux.go's; elsewhere the connections' own Read and
// Write (which park in Go's network poller) serve.
func spinning(c conn) (io.Reader, func(*net.Buffers) (int64, error)) { return nil, nil }
