// Command netcheck proves that two hosts (here: two network namespaces) can
// reach each other over TCP before a training job is started between them.
// One side listens and echoes one line back; the other dials, sends a line
// and checks the echo. Both give up after -timeout, so a broken link is an
// error, never a hang.
//
//	netcheck -listen 10.99.0.1:29400            # on the first host
//	netcheck -dial 10.99.0.1:29400 -msg hello   # on the second
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	listen := flag.String("listen", "", "address to accept one connection on and echo one line back")
	dial := flag.String("dial", "", "address to send -msg to and expect it echoed")
	msg := flag.String("msg", "fulgur", "line to send with -dial")
	timeout := flag.Duration("timeout", 20*time.Second, "give up after this long")
	flag.Parse()
	var err error
	switch {
	case (*listen == "") == (*dial == ""):
		err = errors.New("give exactly one of -listen ADDR or -dial ADDR")
	case *listen != "":
		err = serve(*listen, *timeout)
	default:
		err = check(*dial, *msg, *timeout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "netcheck: %v\n", err)
		os.Exit(1)
	}
}

func serve(addr string, timeout time.Duration) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(timeout))
	// Tell the caller the port is open, so it starts the dialer only now.
	fmt.Printf("listening %s\n", ln.Addr())
	c, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("no connection on %s within %v: %w", addr, timeout, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read from %s: %w", c.RemoteAddr(), err)
	}
	if _, err := c.Write([]byte(line)); err != nil {
		return fmt.Errorf("echo to %s: %w", c.RemoteAddr(), err)
	}
	fmt.Printf("echoed %q to %s\n", strings.TrimSpace(line), c.RemoteAddr())
	return nil
}

func check(addr, msg string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var c net.Conn
	var err error
	// The listener may still be starting: retry until the deadline.
	for {
		c, err = net.DialTimeout("tcp", addr, time.Until(deadline))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("cannot reach %s within %v: %w", addr, timeout, err)
	}
	defer c.Close()
	c.SetDeadline(deadline)
	if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
		return fmt.Errorf("send to %s: %w", addr, err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read echo from %s: %w", addr, err)
	}
	if strings.TrimSpace(got) != msg {
		return fmt.Errorf("%s echoed %q, want %q", addr, strings.TrimSpace(got), msg)
	}
	fmt.Printf("%s -> %s: echo ok\n", c.LocalAddr(), addr)
	return nil
}
