//go:build linux

package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Probe measures the link from this process: rtts one-byte round trips
// and a bulk transfer of bulk bytes, node 1 to node 0.
func (p *Pair) Probe(ctx context.Context, rtts, bulk int) (Probe, error) {
	var ln net.Listener
	err := p.in(0, func() (err error) { ln, err = net.Listen("tcp", p.Addr[0]+":0"); return })
	if err != nil {
		return Probe{}, fmt.Errorf("netns: probe: listen on node 0: %w", err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() { served <- serveProbe(ln) }()
	var c net.Conn
	err = p.in(1, func() (err error) {
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err = d.DialContext(ctx, "tcp", ln.Addr().String())
		return
	})
	if err != nil {
		return Probe{}, fmt.Errorf("netns: probe: node 1 cannot reach node 0 at %s: %w", ln.Addr(), err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(time.Minute))
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	c.(*net.TCPConn).SetNoDelay(true)
	var res Probe
	rt := make([]time.Duration, 0, rtts)
	b := []byte{'p'}
	for range rtts {
		t0 := time.Now()
		if _, err := c.Write(b); err != nil {
			return res, fmt.Errorf("netns: probe: %w", err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return res, fmt.Errorf("netns: probe: %w", err)
		}
		rt = append(rt, time.Since(t0))
	}
	if len(rt) > 0 {
		slices.Sort(rt)
		res.RTT = rt[len(rt)/2]
	}
	if bulk > 0 {
		buf := make([]byte, 1<<20)
		b[0] = 'b'
		t0 := time.Now()
		if _, err := c.Write(b); err != nil {
			return res, fmt.Errorf("netns: probe: %w", err)
		}
		for left := bulk; left > 0; left -= min(left, len(buf)) {
			if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
				return res, fmt.Errorf("netns: probe: %w", err)
			}
		}
		c.(*net.TCPConn).CloseWrite()
		if _, err := io.ReadFull(c, b); err != nil { // the receiver has it all
			return res, fmt.Errorf("netns: probe: %w", err)
		}
		res.Throughput = float64(bulk) / time.Since(t0).Seconds()
	}
	c.Close()
	return res, <-served
}

// serveProbe echoes single bytes until a 'b', then reads to the end and
// answers one byte.
func serveProbe(ln net.Listener) error {
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	c.(*net.TCPConn).SetNoDelay(true)
	b := []byte{0}
	for {
		if _, err := io.ReadFull(c, b); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if b[0] == 'b' {
			break
		}
		if _, err := c.Write(b); err != nil {
			return err
		}
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		return err
	}
	_, err = c.Write(b)
	return err
}

// in runs f on an OS thread inside node i's network namespace: a socket
// belongs to the namespace it was made in, whichever thread uses it later.
// The thread is never returned to the runtime.
func (p *Pair) in(i int, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with the goroutine
		fd, err := unix.Open("/var/run/netns/"+p.NS[i], unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("enter %s: %w", p.NS[i], err)
			return
		}
		done <- f()
	}()
	return <-done
}
