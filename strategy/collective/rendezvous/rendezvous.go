package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/strategy/collective/wire"
)

// Rendezvous is the star of connections between rank 0 and every other rank,
// made once at start: it checks tokens, tells every rank where the others
// listen and which host they run on, carries small exchanges (shared memory
// names, NCCL unique ids), and authenticates the data connections backends
// open between ranks (DialPeer, AcceptPeer).
type Rendezvous struct {
	cfg   Config
	hosts []string // host identity per rank
	addrs []string // data listener per rank
	ln    net.Listener
	peers []net.Conn // rank 0: conn to rank i (nil at 0); others: peers[0] is rank 0
	mu    sync.Mutex
	hb    []byte

	acceptMu sync.Mutex // one AcceptPeer at a time
}

// Rank and Size of this process.
func (r *Rendezvous) Rank() int { return r.cfg.Rank }
func (r *Rendezvous) Size() int { return r.cfg.Size }

// Hosts returns every rank's host identity (HostID): equal strings mean
// the same machine.
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

// Addr returns where rank's data listener accepts connections.
func (r *Rendezvous) Addr(rank int) string { return r.addrs[rank] }

// HostID identifies this machine as the ranks compare it: cluster.HostID
// (host name, boot id, and on Linux the network namespace and /dev/shm).
func HostID() string { return cluster.HostID() }

// Meet runs the rendezvous. Rank 0 listens at MasterAddr:MasterPort (or
// cfg.Listener) and waits for Size-1 joiners presenting the token; the others
// dial it, retrying until it is up. ctx and cfg.Timeout bound the wait.
func Meet(ctx context.Context, cfg Config) (*Rendezvous, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	r := &Rendezvous{cfg: cfg, hosts: make([]string, cfg.Size), addrs: make([]string, cfg.Size), peers: make([]net.Conn, cfg.Size), hb: make([]byte, wire.HeaderSize)}
	if cfg.Size == 1 {
		r.hosts[0] = HostID()
		return r, nil
	}
	// The data listener is opened first so its address can be announced.
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, "0"))
	if err != nil {
		return nil, fmt.Errorf("rendezvous: rank %d: listen for data connections on %q: %w", cfg.Rank, cfg.BindAddr, err)
	}
	r.ln = ln
	if cfg.Rank == 0 {
		err = r.serve(ctx)
	} else {
		err = r.join(ctx, outer)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// masterOffBind refuses a rank 0 that would listen on BindAddr only while
// MasterAddr, where the other ranks dial it, is another address of this
// machine: a socket bound to one address does not answer at another, so
// they would find nothing there until the timeout. A MasterAddr that is
// not this machine's (a name, or an address a NAT forwards here, as a
// Kubernetes service's) is left alone.
func masterOffBind(cfg Config) error {
	bind, master := net.ParseIP(cfg.BindAddr), net.ParseIP(cfg.MasterAddr)
	if cfg.Size < 2 || bind == nil || bind.IsUnspecified() || master == nil || master.IsUnspecified() || master.Equal(bind) {
		return nil
	}
	if !localIP(master) {
		return nil
	}
	return fmt.Errorf("rendezvous: rank 0 would listen on %s only (the address of the interface FULGUR_SOCKET_IFNAME or GLOO_SOCKET_IFNAME names), but MASTER_ADDR %s, where the other ranks look for it, is another address of this machine, where nothing would answer them: set FULGUR_SOCKET_IFNAME to the interface that has %s (the one the other ranks reach), or MASTER_ADDR to %s", cfg.BindAddr, cfg.MasterAddr, cfg.MasterAddr, cfg.BindAddr)
}

// localIP reports whether ip is an address of this machine: loopback (all
// of 127/8 and ::1) or an address of one of its interfaces.
func localIP(ip net.IP) bool {
	if ip.IsLoopback() {
		return true
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

func (r *Rendezvous) port() string {
	_, p, _ := net.SplitHostPort(r.ln.Addr().String())
	return p
}

func (r *Rendezvous) serve(ctx context.Context) error {
	cfg := r.cfg
	ln := cfg.Listener
	if ln == nil {
		if err := masterOffBind(cfg); err != nil {
			return err
		}
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.MasterPort)))
		if err != nil {
			return fmt.Errorf("rendezvous: rank 0: listen for joiners on port %d: %w (is another job using MASTER_PORT? set MASTER_PORT to a free port)", cfg.MasterPort, err)
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
	// refused is the last rank of this job (it had the token) that was
	// turned away, and why: a timeout then says so.
	var refusedMu sync.Mutex
	var refused string
	adm := r.admit(ln, "rendezvous", func(h wire.Hello) string {
		why := r.inJob(h)
		if why != "" {
			refusedMu.Lock()
			refused = why
			refusedMu.Unlock()
		}
		return why
	})
	defer adm.stop()
	port := cfg.MasterPort
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		port = a.Port
	}
	missingRanks := func() []int {
		var missing []int
		for i := 1; i < cfg.Size; i++ {
			if r.peers[i] == nil {
				missing = append(missing, i)
			}
		}
		return missing
	}
	// While ranks are missing, say so now and then: before the timeout a
	// machine that was never started looks like a hang.
	every := min(cfg.Timeout/4, 30*time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	for joined < cfg.Size {
		var a arrival
		select {
		case <-tick.C:
			cfg.Logger.Warn().Ints("missing", missingRanks()).Int("joined", joined).Int("world", cfg.Size).
				Msgf("rendezvous: rank 0 still waits for ranks to join at port %d after %v (it gives up after %v): start every machine's ranks with the same MASTER_ADDR, MASTER_PORT and %s", port, time.Since(start).Round(time.Second), cfg.Timeout, TokenEnv)
			continue
		case a = <-adm.arrivals:
		case err := <-adm.acceptErr:
			missing := missingRanks()
			if ctx.Err() != nil {
				// The ranks that joined hear why rather than an EOF, which a
				// launcher would report as their own failure.
				why := fmt.Sprintf("rank 0 gave up: ranks %v did not join within the timeout (%v)", missing, cfg.Timeout)
				for _, c := range r.peers[1:] {
					if c != nil {
						c.SetWriteDeadline(time.Now().Add(time.Second))
						c.Write(wire.ControlFrame(wire.KindReject, 0, 0, []byte(why)))
					}
				}
				refusedMu.Lock()
				also := refused
				refusedMu.Unlock()
				if also != "" {
					also = " (refused meanwhile: " + also + ")"
				} else if wt := adm.wrongToken(); wt != "" {
					also = fmt.Sprintf(" (%s: give every rank the same %s)", wt, TokenEnv)
				} else if tf := adm.tlsFailure(); tf != "" {
					also = " (" + tf + ")"
				} else {
					also = fmt.Sprintf(" (no process claiming them reached port %d with the token: were they started, with MASTER_ADDR and MASTER_PORT naming this machine and port, and the same %s? FULGUR_TIMEOUT sets how long rank 0 waits)", port, TokenEnv)
				}
				return fmt.Errorf("rendezvous: rank 0: ranks %v did not join within the timeout (%v)%s: %w", missing, cfg.Timeout, also, ctx.Err())
			}
			return fmt.Errorf("rendezvous: rank 0: accept joiners: %w", err)
		}
		if a.h.Abort != "" {
			return r.aborted(ctx, adm, a)
		}
		if r.peers[a.h.Rank] != nil {
			why := fmt.Sprintf("rank %d has already joined from %s, and a second process claimed rank %d from %s: two processes with the same RANK (with fulgur run, two machines with the same -node-rank; by hand, the same NODE_RANK and RANK)", a.h.Rank, r.peers[a.h.Rank].RemoteAddr(), a.h.Rank, a.c.RemoteAddr())
			r.refuse(a.c, "rendezvous", "%s", why)
			a.c.Close()
			refusedMu.Lock()
			refused = why
			refusedMu.Unlock()
			continue
		}
		if why := announcedElsewhere(adv, r.hosts[0], a); why != "" {
			// Every data connection to rank 0 would fail: end the job at
			// once, telling the ranks that joined, as at a timeout.
			r.refuse(a.c, "rendezvous", "%s", why)
			a.c.Close()
			for _, c := range r.peers[1:] {
				if c != nil {
					c.SetWriteDeadline(time.Now().Add(time.Second))
					c.Write(wire.ControlFrame(wire.KindReject, 0, 0, []byte(why)))
				}
			}
			return fmt.Errorf("rendezvous: rank 0: %s", why)
		}
		r.peers[a.h.Rank], r.hosts[a.h.Rank], r.addrs[a.h.Rank] = a.c, a.h.Host, a.h.DataAddr
		proofs[a.h.Rank] = a.proof
		joined++
	}
	reachable(r.hosts, r.addrs, adv)
	table := wire.EncodeTable(r.hosts, r.addrs)
	for i := 1; i < cfg.Size; i++ {
		r.peers[i].SetWriteDeadline(time.Now().Add(cfg.Timeout))
		if _, err := r.peers[i].Write(wire.ControlFrame(wire.KindTable, 0, 0, append(proofs[i], table...))); err != nil {
			return fmt.Errorf("rendezvous: rank 0: send address table to rank %d: %w", i, err)
		}
	}
	return nil
}

// announcedElsewhere says why rank 0, which announces adv (its
// MASTER_ADDR) as its address, cannot be reached there by joiner a, which
// came from another machine: adv is a loopback address, or the address
// that joiner announces as its own; "" when neither. A joiner that reached
// rank 0 over loopback shares its network (containers on the host's
// network), where 127.0.0.1 is rank 0's too. Any other address may reach
// rank 0 through a NAT, and is left alone.
func announcedElsewhere(adv, host0 string, a arrival) string {
	ip := net.ParseIP(adv)
	local, ok := a.c.LocalAddr().(*net.TCPAddr) // where the joiner reached rank 0
	if ip == nil || a.h.Host == host0 || !ok || local.IP.IsLoopback() {
		return ""
	}
	joiner, _, _ := net.SplitHostPort(a.h.DataAddr)
	if !ip.IsLoopback() && !ip.Equal(net.ParseIP(joiner)) {
		return ""
	}
	return fmt.Sprintf("rank %d joined from another machine (host %s, at %s), which reached rank 0 at %s, but rank 0 was started with MASTER_ADDR %s, which it announces as its address and which names the joiner's own machine there: give every machine the same MASTER_ADDR, node 0's address as the others reach it (fulgur run: the same -master-addr on every machine, node 0's included: %s here)",
		a.h.Rank, cluster.HostName(a.h.Host), a.c.RemoteAddr(), local, adv, local.IP)
}

// reachable makes the addresses of rank 0's machine that other machines
// cannot dial dialable. A rank on rank 0's machine announces the local
// address of its connection to rank 0, which is a loopback address when
// MasterAddr resolves to one there (Debian and Ubuntu map the host's own
// name to 127.0.1.1): a rank on another machine that dials it (the members
// of a sub-group that spans machines: hybrid sharding, hier) would reach
// itself. When the job spans machines, such an address takes rank 0's
// host instead (MasterAddr as every rank dials it, adv), with its own
// port; the listener binds every interface. Addresses of a job on one
// machine, and any address that is not a loopback IP, are left alone.
func reachable(hosts, addrs []string, adv string) {
	if ip := net.ParseIP(adv); ip != nil && ip.IsLoopback() {
		return // rank 0 itself is reached over loopback: one machine
	}
	spans := false
	for _, h := range hosts {
		spans = spans || h != hosts[0]
	}
	if !spans {
		return
	}
	for i := 1; i < len(addrs); i++ {
		host, port, err := net.SplitHostPort(addrs[i])
		if ip := net.ParseIP(host); err != nil || hosts[i] != hosts[0] || ip == nil || !ip.IsLoopback() {
			continue
		}
		addrs[i] = net.JoinHostPort(adv, port)
	}
}

// maxHandshakes bounds the handshakes in progress at once on one listener.
const maxHandshakes = 64

// arrival is a connection whose dialer proved the token and passed the
// caller's checks; proof is the acceptor's answer, not yet sent.
type arrival struct {
	c     net.Conn
	h     wire.Hello
	proof []byte
}

// admission accepts connections on a listener and runs the acceptor's half of
// the handshake on each in its own goroutine, so a stranger that connects and
// stays silent (or trickles bytes) cannot hold the real ranks back until the
// timeout; at most maxHandshakes run at once. Refused connections are logged
// and closed; the rest arrive on arrivals.
type admission struct {
	arrivals  chan arrival
	acceptErr chan error    // the accept loop's end (buffered)
	done      chan struct{} // closed by stop: late arrivals are closed
	once      sync.Once

	mu        sync.Mutex
	lastWrong string // the last dialer refused for another token, said in words
	lastTLS   string // the last dialer that failed the TLS handshake, said in words
}

// tlsFailure says who last failed the TLS handshake; "" if none did.
func (a *admission) tlsFailure() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastTLS
}

// wrongToken says who was last refused for holding another token; "" if
// none was.
func (a *admission) wrongToken() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastWrong
}

// wrongTokenError is a refusal of a dialer whose hello proved another
// token than this job's.
type wrongTokenError struct {
	rank int // the rank it claimed
	err  error
}

func (e *wrongTokenError) Error() string { return e.err.Error() }
func (e *wrongTokenError) Unwrap() error { return e.err }

func (a *admission) stop() { a.once.Do(func() { close(a.done) }) }

// admit starts an admission on ln; check returns why a verified hello is
// refused ("" admits it). where names the listener in logs and refusals.
func (r *Rendezvous) admit(ln net.Listener, where string, check func(wire.Hello) string) *admission {
	a := &admission{arrivals: make(chan arrival), acceptErr: make(chan error, 1), done: make(chan struct{})}
	go func() {
		sem := make(chan struct{}, maxHandshakes)
		for {
			c, err := ln.Accept()
			if err != nil {
				a.acceptErr <- err
				return
			}
			// A connection beyond the limit waits for a slot (the others
			// end within the handshake deadline): at the start of a large
			// job, every joiner arrives at once.
			select {
			case sem <- struct{}{}:
			case <-a.done:
				c.Close()
				continue
			}
			go func() {
				defer func() { <-sem }()
				got, err := r.handshake(c, where, check)
				if err != nil {
					var wt *wrongTokenError
					if errors.As(err, &wt) {
						// A timeout then says that the rank came, but
						// with another token, rather than that none came.
						a.mu.Lock()
						a.lastWrong = fmt.Sprintf("a process claiming rank %d reached the %s from %s with another %s", wt.rank, where, c.RemoteAddr(), TokenEnv)
						a.mu.Unlock()
					}
					if errors.Is(err, errTLSHandshake) {
						// It may be a rank of this job whose certificate is
						// wrong: a timeout then says that one came.
						a.mu.Lock()
						a.lastTLS = fmt.Sprintf("a process reached the %s from %s and failed: %v", where, c.RemoteAddr(), err)
						a.mu.Unlock()
					}
					if !errors.Is(err, errRefused) {
						// A peer that never sent a valid hello; refusals
						// were logged as they were sent.
						r.cfg.Logger.Warn().Str("remote", c.RemoteAddr().String()).Err(err).Msgf("refused connection at %s", where)
					}
					c.Close()
					return
				}
				select {
				case a.arrivals <- got:
				case <-a.done:
					c.Close()
				}
			}()
		}
	}()
	return a
}

// refuse sends a rejection to a dialer and returns it as an error.
// The refusal is logged before the refused peer can read it, so the log
// never lags what the peer saw.
func (r *Rendezvous) refuse(c net.Conn, where, format string, a ...any) error {
	msg := fmt.Sprintf(format, a...)
	r.cfg.Logger.Warn().Str("remote", c.RemoteAddr().String()).Str("error", msg).Msgf("refused connection at %s", where)
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(wire.ControlFrame(wire.KindReject, 0, 0, []byte(msg)))
	return fmt.Errorf("%w: %s", errRefused, msg)
}

// errRefused marks an error whose refusal was sent to the peer and logged.
var errRefused = errors.New("refused")

// handshake reads and checks one dialer's hello; a refusal is also sent to
// it. It returns the hello and the acceptor's proof that leads its answer.
func (r *Rendezvous) handshake(c net.Conn, where string, check func(wire.Hello) string) (arrival, error) {
	c.SetDeadline(handshakeDeadline(r.cfg.Timeout))
	defer c.SetDeadline(time.Time{})
	c, err := r.serverConn(c)
	if err != nil {
		return arrival{}, err
	}
	nonceA, err := sendChallenge(c)
	if err != nil {
		return arrival{}, err
	}
	hdr, p, err := wire.ReadControl(c, make([]byte, wire.HeaderSize))
	if err != nil {
		return arrival{}, fmt.Errorf("no valid hello: %w", err)
	}
	if hdr.Kind != wire.KindHello {
		return arrival{}, fmt.Errorf("first frame is %s, not hello", hdr.Kind)
	}
	h, err := wire.DecodeHello(p)
	if err != nil {
		return arrival{}, fmt.Errorf("hello: %w", err)
	}
	nonceD, ok := checkHello(h, r.cfg.Token, nonceA)
	if !ok {
		return arrival{}, &wrongTokenError{rank: h.Rank, err: r.refuse(c, where, "wrong token (claimed rank %d): every rank needs the same %s", h.Rank, TokenEnv)}
	}
	if why := check(h); why != "" {
		return arrival{}, r.refuse(c, where, "%s", why)
	}
	return arrival{c, h, acceptProof(r.cfg.Token, nonceA, nonceD)}, nil
}

// dial connects to addr, runs the dialer's half of the handshake as h.Rank
// and returns the connection with the acceptor's answer (the part after its
// proof). want is the frame kind that answers an accepted hello.
func (r *Rendezvous) dial(c net.Conn, h wire.Hello, want wire.Kind) ([]byte, error) {
	nonceA, err := r.challenge(c)
	if err != nil {
		return nil, err
	}
	return r.answer(c, h, want, nonceA)
}

// challenge reads the acceptor's nonce, the first frame of a dialed
// connection. An error wrapping errNoChallenge means the acceptor closed the
// connection or stayed silent before sending anything.
func (r *Rendezvous) challenge(c net.Conn) ([]byte, error) {
	nonceA, err := readChallenge(c, r.hbuf())
	if err != nil {
		// Over TLS 1.3 the acceptor refuses our certificate after our side
		// of the handshake is done: the refusal shows up here.
		if r.cfg.TLS != nil && strings.Contains(err.Error(), "tls: ") {
			return nil, fmt.Errorf("%w (%s)", err, tlsHint(err))
		}
		if r.cfg.TLS == nil && errors.Is(err, os.ErrDeadlineExceeded) && speaksTLS(c, probeWait(r.cfg.Timeout)) {
			// A rank 0 with TLS waits for our TLS hello, as we wait for
			// its challenge: its reply to a probe tells it from another
			// program that stays silent (a web server waiting for a
			// request).
			return nil, fmt.Errorf("%w: the program there speaks TLS, as a fulgur rank 0 of a job with TLS does, and this rank has none: set %s, %s and %s on every rank", err, TLSCertEnv, TLSKeyEnv, TLSCAEnv)
		}
		if r.cfg.TLS == nil && (errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded)) {
			return nil, fmt.Errorf("%w: %w", errNoChallenge, err)
		}
		return nil, err
	}
	return nonceA, nil
}

// errNoChallenge marks a dialed connection that ended or stayed silent
// before the acceptor's first frame.
var errNoChallenge = errors.New("no challenge")

// otherProgram is what a joiner says when something other than a fulgur
// rank 0 answers at the master's address.
func otherProgram(cfg Config) string {
	return fmt.Sprintf("another program is using MASTER_PORT %d on %s, or MASTER_ADDR names the wrong machine: pick a free MASTER_PORT (the same on every rank), or fix MASTER_ADDR", cfg.MasterPort, cfg.MasterAddr)
}

// tlsProbe is a TLS record holding an empty ClientHello: a TLS server
// answers it at once with an alert record (decode_error), where a fulgur
// rank 0 without TLS would have sent its challenge already and another
// program answers otherwise or not at all.
var tlsProbe = []byte{0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x00, 0x00, 0x00}

// challengeDeadline bounds a joiner's wait for rank 0's challenge: half of
// a handshake's time (handshakeDeadline), so that its probe (speaksTLS)
// finds a rank 0 with TLS still in that handshake, and the joiner's own
// timeout not yet spent: with the whole of it, a rank 0 whose handshake
// began first had given up, or the joiner's timeout ended the probe, and
// a rank 0 with TLS was taken for another program.
func challengeDeadline(timeout time.Duration) time.Time {
	return time.Now().Add(min(timeout, 10*time.Second) / 2)
}

// probeWait is how long speaksTLS waits for an answer: a second, or less
// within a short timeout (a quarter of a handshake's time).
func probeWait(timeout time.Duration) time.Duration {
	return min(time.Second, min(timeout, 10*time.Second)/4)
}

// speaksTLS says whether the acceptor on c, silent so far, answers
// tlsProbe with a TLS alert within wait.
func speaksTLS(c net.Conn, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	c.SetDeadline(deadline)
	if _, err := c.Write(tlsProbe); err != nil {
		return false
	}
	var hdr [3]byte // content type 21 (alert), protocol version 3.x
	_, err := io.ReadFull(c, hdr[:])
	return err == nil && hdr[0] == 0x15 && hdr[1] == 0x03
}

// answer runs the rest of the dialer's half of the handshake, after the
// acceptor's nonce nonceA.
func (r *Rendezvous) answer(c net.Conn, h wire.Hello, want wire.Kind, nonceA []byte) ([]byte, error) {
	nonceD, err := signHello(&h, r.cfg.Token, nonceA)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(wire.ControlFrame(wire.KindHello, 0, 0, h.Encode())); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	hdr, p, err := wire.ReadControl(c, r.hbuf())
	switch {
	case err != nil:
		return nil, fmt.Errorf("no answer to hello: %w", err)
	case hdr.Kind == wire.KindReject:
		return nil, fmt.Errorf("refused us: %s", p)
	case hdr.Kind == wire.KindAbort && want == wire.KindTable:
		// Rank 0 ends the rendezvous: a rank failed before it joined.
		ab, err := decodeAbortFrame(p)
		if err != nil {
			return nil, fmt.Errorf("rank 0 ended the rendezvous with a bad message: %w", err)
		}
		return nil, ab
	case hdr.Kind != want:
		return nil, fmt.Errorf("sent %s instead of %s", hdr.Kind, want)
	}
	rest, ok := checkAccept(p, r.cfg.Token, nonceA, nonceD)
	if !ok {
		return nil, errNoProof
	}
	return rest, nil
}

var errNoProof = errors.New("answered without proving it holds the token")

func (r *Rendezvous) hbuf() []byte { return make([]byte, wire.HeaderSize) }

// outer is Meet's context without the timeout: see joinOnce.
func (r *Rendezvous) join(ctx, outer context.Context) error {
	cfg := r.cfg
	warned := false
	for {
		c, p, err := r.joinOnce(ctx, outer)
		if err == nil {
			hosts, addrs, err := wire.DecodeTable(p, cfg.Size)
			if err != nil {
				c.Close()
				return fmt.Errorf("rendezvous: rank %d: address table: %w", cfg.Rank, err)
			}
			copy(r.hosts, hosts)
			copy(r.addrs, addrs)
			r.peers[0] = c
			return nil
		}
		if !errors.Is(err, errNoChallenge) || ctx.Err() != nil {
			return err
		}
		// Something accepted the connection at MasterAddr:MasterPort but
		// sent no challenge: rank 0 busy with other handshakes, or another
		// program on the port. Try again until the timeout, and say so once.
		if !warned {
			warned = true
			cfg.Logger.Warn().Err(err).Msgf("rendezvous: %s accepted the connection but did not answer as a fulgur rank 0 does: trying again until the timeout (%v); if this repeats, another program is using MASTER_PORT there, or MASTER_ADDR names the wrong machine", cfg.masterHostPort(), cfg.Timeout)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// joinOnce dials rank 0, retrying until it is up, and runs the handshake;
// it returns the connection and rank 0's answer (the address table). An
// error wrapping errNoChallenge may be tried again.
func (r *Rendezvous) joinOnce(ctx, outer context.Context) (net.Conn, []byte, error) {
	cfg := r.cfg
	var c net.Conn
	var d net.Dialer
	if cfg.BindAddr != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(cfg.BindAddr)}
	}
	// why is the last failure that says more than the timeout that ended
	// the waiting: a name that does not resolve, a refused connection.
	var why error
	warnedDNS := false
	// Until rank 0 answers, say now and then that this rank waits, as rank
	// 0 does for its joiners: before the timeout, a rank 0 that was never
	// started (or another MASTER_ADDR or MASTER_PORT) looks like a hang.
	every := min(cfg.Timeout/4, 30*time.Second)
	start := time.Now()
	nextWarn := start.Add(every)
	for {
		var err error
		c, err = d.DialContext(ctx, "tcp", cfg.masterHostPort())
		if err == nil {
			break
		}
		// A connect that times out met nothing at all (no SYN-ACK, no
		// refusal): an address no machine answers at, or a firewall that
		// drops the packets. An unreachable one is said so by the network.
		var ne net.Error
		timedOut := errors.As(err, &ne) && ne.Timeout()
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			err = fmt.Errorf("%w (nothing listens at %s: was rank 0 started, with the same MASTER_PORT, on the machine MASTER_ADDR names? FULGUR_TIMEOUT sets how long a rank waits)", err, cfg.masterHostPort())
		case timedOut, errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
			err = fmt.Errorf("%w (nothing at %s answered: is MASTER_ADDR %s node 0's address as this machine reaches it, and does no firewall drop MASTER_PORT %d between them? FULGUR_TIMEOUT sets how long a rank waits)", err, cfg.masterHostPort(), cfg.MasterAddr, cfg.MasterPort)
		}
		if now := time.Now(); every > 0 && now.After(nextWarn) && ctx.Err() == nil {
			nextWarn = now.Add(every)
			cfg.Logger.Warn().Err(err).Msgf("rendezvous: rank %d still waits for rank 0 at %s after %v (it gives up after %v)", cfg.Rank, cfg.masterHostPort(), now.Sub(start).Round(time.Second), cfg.Timeout)
		}
		var dns *net.DNSError
		if errors.As(err, &dns) && dns.IsNotFound {
			err = fmt.Errorf("%w (MASTER_ADDR %q does not resolve on this machine: check the name, or give node 0's IP address)", err, cfg.MasterAddr)
			if !warnedDNS {
				warnedDNS = true
				cfg.Logger.Warn().Err(err).Msgf("rendezvous: trying again until the timeout (%v)", cfg.Timeout)
			}
		}
		// A dial that the timeout cut short says less than one before it
		// (a host unreachable, a refused connection): keep that one.
		if why == nil || (ctx.Err() == nil && !timedOut) {
			why = err
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("rendezvous: rank %d: rank 0 at %s did not answer within the timeout (%v): %w", cfg.Rank, cfg.masterHostPort(), cfg.Timeout, why)
		case <-time.After(50 * time.Millisecond): // rank 0 may not be listening yet
		}
	}
	raw := c // the TCP connection under TLS, if any
	// Rank 0 sends its challenge as soon as it accepts: a connection that
	// gets none in a while is tried again (joiners wait for a handshake
	// slot) and, if that repeats, named as another program's.
	if cfg.TLS == nil {
		raw.SetReadDeadline(challengeDeadline(cfg.Timeout))
	}
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	adv := cfg.AdvertiseAddr
	if adv == "" {
		adv, _, _ = net.SplitHostPort(c.LocalAddr().String())
	}
	fail := func(err error) (net.Conn, []byte, error) {
		c.Close()
		return nil, nil, fmt.Errorf("rendezvous: rank %d: rank 0 at %s: %w", cfg.Rank, cfg.masterHostPort(), err)
	}
	c, err := r.clientConn(ctx, c)
	if err != nil {
		raw.Close()
		return nil, nil, fmt.Errorf("rendezvous: rank %d: rank 0 at %s: %w", cfg.Rank, cfg.masterHostPort(), err)
	}
	nonceA, err := r.challenge(c)
	switch {
	case errors.Is(err, errNoChallenge):
		return fail(fmt.Errorf("%w; the program there accepts connections but does not answer as a fulgur rank 0 (nor speaks TLS): %s", err, otherProgram(cfg)))
	case errors.Is(err, wire.ErrFrame):
		return fail(fmt.Errorf("%w: the program there is not a fulgur rank 0 (it sent bytes that are not fulgur frames): %s", err, otherProgram(cfg)))
	case err != nil:
		return fail(err)
	}
	// The table comes once every rank has joined, and when one never
	// does, rank 0 decides: it sends the joined ranks why it gave up (the
	// missing ranks). A joiner whose own timeout ends first (started
	// before rank 0) waits a little longer for that verdict, rather than
	// fail on its own with a bare read timeout that a launcher would
	// report as the job's first failure.
	if !stop() {
		return fail(ctx.Err())
	}
	deadline, _ := ctx.Deadline()
	extra := min(cfg.Timeout, 10*time.Second)
	raw.SetDeadline(deadline.Add(extra))
	stopOuter := context.AfterFunc(outer, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer stopOuter()
	h := wire.Hello{Rank: cfg.Rank, Size: cfg.Size, Host: HostID(), DataAddr: net.JoinHostPort(adv, r.port())}
	p, err := r.answer(c, h, wire.KindTable, nonceA)
	if ab := (*AbortedError)(nil); errors.As(err, &ab) {
		// Rank 0 closes the connection once every rank has heard it.
		awaitClose(c)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && outer.Err() == nil {
		return fail(fmt.Errorf("%w: rank 0 sent neither the address table nor why it gave up within the timeout (%v) and %v more: is rank 0 stopped or its machine unreachable?", err, cfg.Timeout, extra))
	}
	if errors.Is(err, errNoProof) {
		c.Close()
		return nil, nil, fmt.Errorf("rendezvous: rank %d: the process at %s answered without proving it holds the token: it is not this job's rank 0 (check MASTER_ADDR, MASTER_PORT and %s)", cfg.Rank, cfg.masterHostPort(), TokenEnv)
	}
	if err != nil {
		return fail(err)
	}
	if !stopOuter() {
		return fail(outer.Err())
	}
	raw.SetDeadline(time.Time{})
	return c, p, nil
}

// DialPeer opens a data connection to rank's data listener and proves the
// token both ways (a listener that cannot prove it is refused). ctx and the
// configured timeout bound the connection and its handshake.
func (r *Rendezvous) DialPeer(ctx context.Context, rank int) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	addr := r.addrs[rank]
	fail := func(err error) error {
		return fmt.Errorf("rendezvous: rank %d: data connection to rank %d at %s: %w", r.cfg.Rank, rank, addr, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fail(err)
	}
	raw := c // the TCP connection under TLS, if any
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.SetDeadline(handshakeDeadline(r.cfg.Timeout))
	if c, err = r.clientConn(ctx, c); err != nil {
		raw.Close()
		return nil, fail(err)
	}
	h := wire.Hello{Rank: r.cfg.Rank, Size: r.cfg.Size, Host: HostID(), DataAddr: "-:0"}
	rest, err := r.dial(c, h, wire.KindAccept)
	if err == nil && len(rest) != 0 {
		err = errNoProof
	}
	if errors.Is(err, errNoProof) {
		err = fmt.Errorf("the listener did not prove it holds the token: not this job's rank %d", rank)
	}
	if err != nil {
		c.Close()
		return nil, fail(err)
	}
	if !stop() {
		c.Close()
		return nil, fail(ctx.Err())
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// AcceptPeer waits on this rank's data listener for rank to connect with
// DialPeer, refusing (and logging) every other connection: strangers, wrong
// tokens, garbage, other ranks. Handshakes run side by side, so a silent
// stranger does not hold rank back. ctx and the configured timeout bound the
// wait.
func (r *Rendezvous) AcceptPeer(ctx context.Context, rank int) (net.Conn, error) {
	r.acceptMu.Lock()
	defer r.acceptMu.Unlock()
	if r.ln == nil {
		return nil, fmt.Errorf("rendezvous: rank %d: no data listener (a group of one, or closed)", r.cfg.Rank)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	tl, _ := r.ln.(*net.TCPListener)
	adm := r.admit(r.ln, "data port", func(h wire.Hello) string {
		if h.Rank != rank || h.Size != r.cfg.Size {
			return fmt.Sprintf("rank %d of %d connected, expected rank %d of %d", h.Rank, h.Size, rank, r.cfg.Size)
		}
		return ""
	})
	// The accept loop ends when its Accept fails: kick it with a deadline
	// (the listener stays open for later calls) and wait for it.
	kick := func() {
		if tl != nil {
			tl.SetDeadline(time.Unix(1, 0))
		} else {
			r.ln.Close()
		}
	}
	stopKick := context.AfterFunc(ctx, kick)
	defer stopKick()
	defer adm.stop()
	select {
	case a := <-adm.arrivals:
		stopKick()
		r.endAccept(adm, kick, tl)
		a.c.SetWriteDeadline(time.Now().Add(r.cfg.Timeout))
		if _, err := a.c.Write(wire.ControlFrame(wire.KindAccept, 0, 0, a.proof)); err != nil {
			a.c.Close()
			return nil, fmt.Errorf("rendezvous: rank %d: answer rank %d: %w", r.cfg.Rank, rank, err)
		}
		a.c.SetWriteDeadline(time.Time{})
		return a.c, nil
	case err := <-adm.acceptErr:
		if tl != nil {
			tl.SetDeadline(time.Time{})
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("rendezvous: rank %d: rank %d did not connect within the timeout (%v): %w", r.cfg.Rank, rank, r.cfg.Timeout, ctx.Err())
		}
		return nil, fmt.Errorf("rendezvous: rank %d: accept rank %d: %w", r.cfg.Rank, rank, err)
	}
}

// endAccept stops an admission's accept loop and makes the listener usable
// again.
func (r *Rendezvous) endAccept(adm *admission, kick func(), tl *net.TCPListener) {
	adm.stop()
	kick()
	<-adm.acceptErr
	if tl != nil {
		tl.SetDeadline(time.Time{})
	}
}

// StopAccepting closes this rank's data listener: a backend calls it once
// its data connections are made, so nothing else can connect.
func (r *Rendezvous) StopAccepting() {
	if r.ln != nil {
		r.ln.Close()
	}
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
		if _, err := c.Write(wire.ControlFrame(wire.KindExchange, 0, 0, wire.EncodeBlobs([][]byte{blob}))); err != nil {
			return nil, fmt.Errorf("rendezvous: rank %d: exchange: rank 0: %w", cfg.Rank, err)
		}
		hdr, p, err := wire.ReadControl(c, r.hb)
		if err != nil {
			return nil, fmt.Errorf("rendezvous: rank %d: exchange: rank 0: %w", cfg.Rank, err)
		}
		if hdr.Kind != wire.KindExchange {
			return nil, fmt.Errorf("rendezvous: rank %d: exchange: rank 0 sent %s", cfg.Rank, hdr.Kind)
		}
		return wire.DecodeBlobs(p, cfg.Size)
	}
	for i := 1; i < cfg.Size; i++ {
		c := r.peers[i]
		c.SetDeadline(deadline)
		hdr, p, err := wire.ReadControl(c, r.hb)
		if err == nil && hdr.Kind != wire.KindExchange {
			err = fmt.Errorf("sent %s", hdr.Kind)
		}
		var bs [][]byte
		if err == nil {
			bs, err = wire.DecodeBlobs(p, 1)
		}
		if err != nil {
			return nil, fmt.Errorf("rendezvous: rank 0: exchange: rank %d: %w", i, err)
		}
		out[i] = bs[0]
	}
	msg := wire.ControlFrame(wire.KindExchange, 0, 0, wire.EncodeBlobs(out))
	for i := 1; i < cfg.Size; i++ {
		if _, err := r.peers[i].Write(msg); err != nil {
			return nil, fmt.Errorf("rendezvous: rank 0: exchange: rank %d: %w", i, err)
		}
		r.peers[i].SetDeadline(time.Time{})
	}
	return out, nil
}

// Close closes the rendezvous connections and the data listener. Closing
// it again does nothing more: a caller that has handed it to a group whose
// Close closes it too (tcp.NewRing, shm.New) may still close it itself.
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
			hb := make([]byte, wire.HeaderSize)
			for {
				if _, _, err := wire.ReadControl(c, hb); err != nil {
					lost(i, err)
					return
				}
			}
		}()
	}
}
