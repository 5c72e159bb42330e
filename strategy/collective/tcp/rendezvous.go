package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Rendezvous is the star of connections between rank 0 and every other rank,
// made once at start: it checks tokens, tells every rank where the others
// listen and which host they run on, and carries small exchanges (shared
// memory names, NCCL unique ids). Backends build on it; users normally call
// New instead.
type Rendezvous struct {
	cfg   Config
	hosts []string // host identity per rank
	addrs []string // ring listener per rank
	ln    net.Listener
	peers []net.Conn // rank 0: conn to rank i (nil at 0); others: peers[0] is rank 0
	mu    sync.Mutex
	hb    []byte
}

// Rank and Size of this process.
func (r *Rendezvous) Rank() int { return r.cfg.Rank }
func (r *Rendezvous) Size() int { return r.cfg.Size }

// Hosts returns every rank's host identity (host name and boot id): equal
// strings mean the same machine.
func (r *Rendezvous) Hosts() []string { return r.hosts }

// SameHost reports whether every rank runs on this machine.
func (r *Rendezvous) SameHost() bool {
	for _, h := range r.hosts {
		if h != r.hosts[0] {
			return false
		}
	}
	return true
}

// Config returns the validated configuration.
func (r *Rendezvous) Config() Config { return r.cfg }

// HostID identifies this machine: host name plus the kernel's boot id, so two
// containers with the same name on different machines differ.
func HostID() string {
	name, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return name + "/" + strings.TrimSpace(string(boot))
}

// Meet runs the rendezvous. Rank 0 listens at MasterAddr:MasterPort (or
// cfg.Listener) and waits for Size-1 joiners presenting the token; the others
// dial it, retrying until it is up. ctx and cfg.Timeout bound the wait.
func Meet(ctx context.Context, cfg Config) (*Rendezvous, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	r := &Rendezvous{cfg: cfg, hosts: make([]string, cfg.Size), addrs: make([]string, cfg.Size), peers: make([]net.Conn, cfg.Size), hb: make([]byte, headerSize)}
	if cfg.Size == 1 {
		r.hosts[0] = HostID()
		return r, nil
	}
	// The ring listener is opened first so its address can be announced.
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, "0"))
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d: listen for ring peers on %q: %w", cfg.Rank, cfg.BindAddr, err)
	}
	r.ln = ln
	if cfg.Rank == 0 {
		err = r.serve(ctx)
	} else {
		err = r.join(ctx)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Rendezvous) port() string {
	_, p, _ := net.SplitHostPort(r.ln.Addr().String())
	return p
}

func (r *Rendezvous) serve(ctx context.Context) error {
	cfg := r.cfg
	ln := cfg.Listener
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.MasterPort)))
		if err != nil {
			return fmt.Errorf("tcp: rank 0: listen for joiners on port %d: %w (is another job using MASTER_PORT?)", cfg.MasterPort, err)
		}
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	adv := cfg.AdvertiseAddr
	if adv == "" {
		adv = cfg.MasterAddr
	}
	if adv == "" {
		adv = "127.0.0.1"
	}
	r.hosts[0], r.addrs[0] = HostID(), net.JoinHostPort(adv, r.port())
	joined := 1
	proofs := make([][]byte, cfg.Size)
	// Each connection's handshake runs on its own, so a stranger that
	// connects and stays silent (or trickles bytes) cannot hold the real
	// ranks back until the timeout; at most maxHandshakes run at once.
	type admitted struct {
		c     net.Conn
		h     hello
		proof []byte
		err   error
	}
	results := make(chan admitted)
	acceptErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		sem := make(chan struct{}, maxHandshakes)
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			select {
			case sem <- struct{}{}:
			default:
				cfg.Logger.Warn().Str("remote", c.RemoteAddr().String()).Msg("refused connection at rendezvous: too many handshakes at once")
				c.Close()
				continue
			}
			go func() {
				defer func() { <-sem }()
				h, proof, err := r.admit(c)
				if err != nil && !errors.Is(err, errRefused) {
					// A peer that never sent a valid hello; refusals
					// were logged as they were sent.
					cfg.Logger.Warn().Str("remote", c.RemoteAddr().String()).Err(err).Msg("refused connection at rendezvous")
				}
				select {
				case results <- admitted{c, h, proof, err}:
				case <-done:
					c.Close()
				}
			}()
		}
	}()
	for joined < cfg.Size {
		var a admitted
		select {
		case a = <-results:
		case err := <-acceptErr:
			var missing []int
			for i := 1; i < cfg.Size; i++ {
				if r.peers[i] == nil {
					missing = append(missing, i)
				}
			}
			if ctx.Err() != nil {
				return fmt.Errorf("tcp: rank 0: ranks %v did not join within the timeout (%v): %w", missing, cfg.Timeout, ctx.Err())
			}
			return fmt.Errorf("tcp: rank 0: accept joiners: %w", err)
		}
		if a.err == nil && r.peers[a.h.rank] != nil {
			a.err = r.refuse(a.c, "rank %d has already joined (two processes with the same rank?)", a.h.rank)
		}
		if a.err != nil { // logged where it was found
			a.c.Close()
			continue
		}
		r.peers[a.h.rank], r.hosts[a.h.rank], r.addrs[a.h.rank] = a.c, a.h.host, a.h.dataAddr
		proofs[a.h.rank] = a.proof
		joined++
	}
	table := encodeTable(r.hosts, r.addrs)
	for i := 1; i < cfg.Size; i++ {
		r.peers[i].SetWriteDeadline(time.Now().Add(cfg.Timeout))
		if _, err := r.peers[i].Write(controlFrame(kindTable, 0, 0, append(proofs[i], table...))); err != nil {
			return fmt.Errorf("tcp: rank 0: send address table to rank %d: %w", i, err)
		}
	}
	return nil
}

// maxHandshakes bounds the rendezvous handshakes in progress at once.
const maxHandshakes = 64

// refuse sends a rejection to a joiner and returns it as an error.
// The refusal is logged before the refused peer can read it, so the log
// never lags what the peer saw.
func (r *Rendezvous) refuse(c net.Conn, format string, a ...any) error {
	msg := fmt.Sprintf(format, a...)
	r.cfg.Logger.Warn().Str("remote", c.RemoteAddr().String()).Str("error", msg).Msg("refused connection at rendezvous")
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(controlFrame(kindReject, 0, 0, []byte(msg)))
	return fmt.Errorf("%w: %s", errRefused, msg)
}

// errRefused marks an error whose refusal was sent to the peer and logged.
var errRefused = errors.New("refused")

// admit reads and checks one joiner's hello (whether its rank has already
// joined is checked by the caller); a refusal is also sent to it.
// It returns the hello and the acceptor's proof that leads the table frame.
func (r *Rendezvous) admit(c net.Conn) (hello, []byte, error) {
	c.SetDeadline(handshakeDeadline(r.cfg.Timeout))
	defer c.SetDeadline(time.Time{})
	nonceA, err := sendChallenge(c)
	if err != nil {
		return hello{}, nil, err
	}
	hdr, p, err := readControl(c, make([]byte, headerSize))
	if err != nil {
		return hello{}, nil, fmt.Errorf("no valid hello: %w", err)
	}
	if hdr.kind != kindHello {
		return hello{}, nil, fmt.Errorf("first frame is %s, not hello", hdr.kind)
	}
	h, err := decodeHello(p)
	if err != nil {
		return hello{}, nil, fmt.Errorf("hello: %w", err)
	}
	refuse := func(format string, a ...any) (hello, []byte, error) {
		return hello{}, nil, r.refuse(c, format, a...)
	}
	nonceD, ok := checkHello(h, r.cfg.Token, nonceA)
	if !ok {
		return refuse("wrong token (claimed rank %d): every rank needs the same %s", h.rank, TokenEnv)
	}
	if h.size != r.cfg.Size {
		return refuse("rank %d says the world has %d ranks, rank 0 says %d", h.rank, h.size, r.cfg.Size)
	}
	if h.rank < 1 || h.rank >= r.cfg.Size {
		return refuse("rank %d is outside 1..%d", h.rank, r.cfg.Size-1)
	}
	if _, _, err := net.SplitHostPort(h.dataAddr); err != nil {
		return refuse("rank %d announced a bad address %q", h.rank, h.dataAddr)
	}
	return h, acceptProof(r.cfg.Token, nonceA, nonceD), nil
}

func (r *Rendezvous) join(ctx context.Context) error {
	cfg := r.cfg
	var c net.Conn
	var d net.Dialer
	if cfg.BindAddr != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(cfg.BindAddr)}
	}
	for {
		var err error
		c, err = d.DialContext(ctx, "tcp", cfg.masterHostPort())
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tcp: rank %d: rank 0 at %s did not answer within the timeout (%v): %w", cfg.Rank, cfg.masterHostPort(), cfg.Timeout, err)
		case <-time.After(50 * time.Millisecond): // rank 0 may not be listening yet
		}
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	adv := cfg.AdvertiseAddr
	if adv == "" {
		adv, _, _ = net.SplitHostPort(c.LocalAddr().String())
	}
	nonceA, err := readChallenge(c, r.hb)
	if err != nil {
		c.Close()
		return fmt.Errorf("tcp: rank %d: rendezvous with rank 0 at %s: %w", cfg.Rank, cfg.masterHostPort(), err)
	}
	h := hello{rank: cfg.Rank, size: cfg.Size, host: HostID(), dataAddr: net.JoinHostPort(adv, r.port())}
	nonceD, err := signHello(&h, cfg.Token, nonceA)
	if err != nil {
		c.Close()
		return fmt.Errorf("tcp: rank %d: %w", cfg.Rank, err)
	}
	if _, err := c.Write(controlFrame(kindHello, 0, 0, h.encode())); err != nil {
		c.Close()
		return fmt.Errorf("tcp: rank %d: send hello to rank 0: %w", cfg.Rank, err)
	}
	hdr, p, err := readControl(c, r.hb)
	if err != nil {
		c.Close()
		return fmt.Errorf("tcp: rank %d: no address table from rank 0 at %s: %w", cfg.Rank, cfg.masterHostPort(), err)
	}
	switch hdr.kind {
	case kindReject:
		c.Close()
		return fmt.Errorf("tcp: rank %d: rank 0 refused us: %s", cfg.Rank, p)
	case kindTable:
	default:
		c.Close()
		return fmt.Errorf("tcp: rank %d: rank 0 sent %s instead of the address table", cfg.Rank, hdr.kind)
	}
	p, ok := checkAccept(p, cfg.Token, nonceA, nonceD)
	if !ok {
		c.Close()
		return fmt.Errorf("tcp: rank %d: the process at %s answered without proving it holds the token: it is not this job's rank 0 (check MASTER_ADDR, MASTER_PORT and %s)", cfg.Rank, cfg.masterHostPort(), TokenEnv)
	}
	hosts, addrs, err := decodeTable(p, cfg.Size)
	if err != nil {
		c.Close()
		return fmt.Errorf("tcp: rank %d: address table: %w", cfg.Rank, err)
	}
	copy(r.hosts, hosts)
	copy(r.addrs, addrs)
	r.peers[0] = c
	return nil
}

// Exchange gives every rank every rank's blob (index = rank), through rank 0.
// Every rank must call it, in the same order.
func (r *Rendezvous) Exchange(ctx context.Context, blob []byte) ([][]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg := r.cfg
	out := make([][]byte, cfg.Size)
	out[cfg.Rank] = blob
	if cfg.Size == 1 {
		return out, nil
	}
	deadline := time.Now().Add(cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if cfg.Rank != 0 {
		c := r.peers[0]
		c.SetDeadline(deadline)
		defer c.SetDeadline(time.Time{})
		if _, err := c.Write(controlFrame(kindExchange, 0, 0, encodeBlobs([][]byte{blob}))); err != nil {
			return nil, fmt.Errorf("tcp: rank %d: exchange: rank 0: %w", cfg.Rank, err)
		}
		hdr, p, err := readControl(c, r.hb)
		if err != nil {
			return nil, fmt.Errorf("tcp: rank %d: exchange: rank 0: %w", cfg.Rank, err)
		}
		if hdr.kind != kindExchange {
			return nil, fmt.Errorf("tcp: rank %d: exchange: rank 0 sent %s", cfg.Rank, hdr.kind)
		}
		return decodeBlobs(p, cfg.Size)
	}
	for i := 1; i < cfg.Size; i++ {
		c := r.peers[i]
		c.SetDeadline(deadline)
		hdr, p, err := readControl(c, r.hb)
		if err == nil && hdr.kind != kindExchange {
			err = fmt.Errorf("sent %s", hdr.kind)
		}
		var bs [][]byte
		if err == nil {
			bs, err = decodeBlobs(p, 1)
		}
		if err != nil {
			return nil, fmt.Errorf("tcp: rank 0: exchange: rank %d: %w", i, err)
		}
		out[i] = bs[0]
	}
	msg := controlFrame(kindExchange, 0, 0, encodeBlobs(out))
	for i := 1; i < cfg.Size; i++ {
		if _, err := r.peers[i].Write(msg); err != nil {
			return nil, fmt.Errorf("tcp: rank 0: exchange: rank %d: %w", i, err)
		}
		r.peers[i].SetDeadline(time.Time{})
	}
	return out, nil
}

// Close closes the rendezvous connections and listener.
func (r *Rendezvous) Close() error {
	for _, c := range r.peers {
		if c != nil {
			c.Close()
		}
	}
	if r.ln != nil {
		r.ln.Close()
	}
	return nil
}

// Watch starts one goroutine per star connection (rank 0: one per joiner;
// others: the one to rank 0) that calls lost(rank, err) once when that
// connection ends: the peer process died or closed. Backends that move data
// elsewhere (shm) use it to notice dead peers. After Watch, Exchange must not
// be called. The goroutines end when the connections close (Close).
func (r *Rendezvous) Watch(lost func(rank int, err error)) {
	for i, c := range r.peers {
		if c == nil {
			continue
		}
		c.SetDeadline(time.Time{})
		go func() {
			hb := make([]byte, headerSize)
			for {
				if _, _, err := readControl(c, hb); err != nil {
					lost(i, err)
					return
				}
			}
		}()
	}
}
