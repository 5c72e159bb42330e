package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/strategy/collective/wire"
)

// A process that fails before it meets the others (a bad flag, a missing
// checkpoint or dataset on its machine) would leave every other rank
// waiting for it until the timeout, with nothing to say but "rank N never
// joined". Abort makes it tell the job instead: a rank other than 0 dials
// rank 0 and presents a hello that carries its reason (signed like every
// hello, so a stranger without the token cannot end a job); rank 0 stops
// waiting, sends the verdict (a KindAbort frame) to every rank that has
// joined and to every rank that arrives within abortGrace, and fails with
// it. A rank 0 that fails itself listens at MasterAddr:MasterPort and
// gives every rank that arrives its own reason.

// AbortedError is Meet's error when a rank of the job failed before it
// joined and said why (Abort), and Abort's when rank 0 had failed too.
type AbortedError struct {
	Rank   int    // the rank that failed
	Host   string // its host name ("" when it sent none)
	Reason string // its error
}

func (e *AbortedError) Error() string {
	where := ""
	if e.Host != "" {
		where = " on host " + e.Host
	}
	return fmt.Sprintf("rank %d%s failed before the job met: %s", e.Rank, where, e.Reason)
}

// abortGrace bounds how long rank 0, once the job is over, keeps telling
// the ranks that arrive late why: those started at about the same time
// as the others arrive within it; a later one waits for its own timeout.
const abortGrace = 30 * time.Second

// maxReason bounds the reason a hello carries.
const maxReason = 4096

// The KindAbort frame rank 0 sends carries the failed rank as Blame and
// "host\nreason" as Msg (a host name holds no newline).
func abortFrame(e *AbortedError) []byte {
	return wire.ControlFrame(wire.KindAbort, 0, 0, wire.Abort{From: 0, Blame: e.Rank, Msg: e.Host + "\n" + e.Reason}.Encode())
}

func decodeAbortFrame(p []byte) (*AbortedError, error) {
	a, err := wire.DecodeAbort(p)
	if err != nil {
		return nil, err
	}
	host, reason, ok := strings.Cut(a.Msg, "\n")
	if !ok {
		host, reason = "", a.Msg
	}
	return &AbortedError{Rank: a.Blame, Host: host, Reason: reason}, nil
}

// Abort tells the job of cfg that this process failed before it could join
// (reason: its error, in a sentence), so the other ranks end at once with
// that reason instead of waiting for cfg.Timeout. A rank other than 0
// dials rank 0, retrying while it is not up yet, until rank 0 has heard it
// and told every rank (it closes the connection then); rank 0 listens at
// MasterAddr:MasterPort (or cfg.Listener) and answers every rank that
// arrives with the reason, until all have heard it. ctx and cfg.Timeout
// bound either. It returns nil once rank 0 heard it (for rank 0: once
// every other rank did), and an error saying why not otherwise.
func Abort(ctx context.Context, cfg Config, reason string) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Size == 1 {
		return nil
	}
	if len(reason) > maxReason {
		reason = reason[:maxReason] + "..."
	}
	if reason == "" {
		reason = "no reason given"
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	r := &Rendezvous{cfg: cfg, hosts: make([]string, cfg.Size), addrs: make([]string, cfg.Size), peers: make([]net.Conn, cfg.Size), hb: make([]byte, wire.HeaderSize)}
	if cfg.Rank == 0 {
		return r.abortAsRoot(ctx, reason)
	}
	return r.abortAsJoiner(ctx, reason)
}

// abortAsRoot is Abort on rank 0: the rendezvous port answers every rank
// with the reason.
func (r *Rendezvous) abortAsRoot(ctx context.Context, reason string) error {
	cfg := r.cfg
	ln := cfg.Listener
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.MasterPort)))
		if err != nil {
			return fmt.Errorf("rendezvous: rank 0: listen on port %d to tell the other ranks: %w", cfg.MasterPort, err)
		}
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	adm := r.admit(ln, "rendezvous", r.inJob)
	defer adm.stop()
	told := map[int]bool{}
	verdict := &AbortedError{Rank: 0, Host: cluster.HostName(HostID()), Reason: reason}
	closeAll(r.tell(ctx, adm, verdict, told, nil))
	if missing := r.untold(told); len(missing) > 0 {
		return fmt.Errorf("rendezvous: rank 0: ranks %v did not reach rank 0 within the timeout (%v) to hear why it failed", missing, cfg.Timeout)
	}
	return nil
}

// inJob is rank 0's check of a hello's place in the job.
func (r *Rendezvous) inJob(h wire.Hello) string {
	cfg := r.cfg
	switch _, _, err := net.SplitHostPort(h.DataAddr); {
	case h.Size != cfg.Size:
		return fmt.Sprintf("rank %d says the world has %d ranks, rank 0 says %d: start every rank with the same WORLD_SIZE (with fulgur run, the same -nnodes and -nproc on every machine)", h.Rank, h.Size, cfg.Size)
	case h.Rank < 1 || h.Rank >= cfg.Size:
		return fmt.Sprintf("rank %d is outside 1..%d", h.Rank, cfg.Size-1)
	case err != nil:
		return fmt.Sprintf("rank %d announced a bad address %q", h.Rank, h.DataAddr)
	}
	return ""
}

// tell sends verdict to every rank that arrives on adm (those in told
// have heard it) until every rank has, ctx ends, or grace (nil: none)
// fires. A rank that arrives to abort itself hears it too, and is logged.
// It returns the connections told, which the caller closes at the end:
// a rank that heard the verdict waits for that close before it ends, so
// that a launcher that stops the rest of its machine's ranks when one
// ends does not stop rank 0 before every rank has heard it.
func (r *Rendezvous) tell(ctx context.Context, adm *admission, verdict *AbortedError, told map[int]bool, grace <-chan time.Time) (held []net.Conn) {
	msg := abortFrame(verdict)
	for len(r.untold(told)) > 0 {
		select {
		case a := <-adm.arrivals:
			if a.h.Abort != "" && a.h.Rank != verdict.Rank {
				r.cfg.Logger.Warn().Int("failed_rank", a.h.Rank).Str("remote", a.c.RemoteAddr().String()).
					Msgf("rendezvous: %s", &AbortedError{Rank: a.h.Rank, Host: cluster.HostName(a.h.Host), Reason: a.h.Abort})
			}
			a.c.SetWriteDeadline(time.Now().Add(time.Second))
			a.c.Write(msg)
			held = append(held, a.c)
			told[a.h.Rank] = true
		case <-adm.acceptErr:
			return held
		case <-ctx.Done():
			return held
		case <-grace:
			return held
		}
	}
	return held
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// awaitClose waits, until c's deadline, for rank 0 to close c after it
// sent the verdict (see tell).
func awaitClose(c net.Conn) {
	b := make([]byte, 64)
	for {
		if _, err := c.Read(b); err != nil {
			return
		}
	}
}

// untold lists the ranks 1..Size-1 not in told.
func (r *Rendezvous) untold(told map[int]bool) []int {
	var missing []int
	for i := 1; i < r.cfg.Size; i++ {
		if !told[i] {
			missing = append(missing, i)
		}
	}
	return missing
}

// aborted ends serve when rank a.h.Rank arrived to say it failed: every
// rank that joined hears why at once, and those that arrive within
// abortGrace (bounded by the rendezvous's timeout) as they come.
func (r *Rendezvous) aborted(ctx context.Context, adm *admission, a arrival) error {
	verdict := &AbortedError{Rank: a.h.Rank, Host: cluster.HostName(a.h.Host), Reason: a.h.Abort}
	if ip, _, err := net.SplitHostPort(a.c.RemoteAddr().String()); err == nil && verdict.Host == "" {
		verdict.Host = ip
	}
	msg := abortFrame(verdict)
	told := map[int]bool{a.h.Rank: true}
	a.c.SetWriteDeadline(time.Now().Add(time.Second))
	a.c.Write(msg)
	held := []net.Conn{a.c} // closed at the end, as tell's; the peers by Meet
	defer func() { closeAll(held) }()
	for i, c := range r.peers {
		if c == nil || i == 0 {
			continue
		}
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write(msg)
		told[i] = true
	}
	missing := r.untold(told)
	r.cfg.Logger.Warn().Ints("not_yet_told", missing).Str("remote", a.c.RemoteAddr().String()).
		Msgf("rendezvous: %s; the job ends: telling every rank", verdict)
	if len(missing) > 0 {
		grace := time.NewTimer(min(r.cfg.Timeout, abortGrace))
		defer grace.Stop()
		held = append(held, r.tell(ctx, adm, verdict, told, grace.C)...)
	}
	return fmt.Errorf("rendezvous: rank 0: %w", verdict)
}

// abortAsJoiner is Abort on a rank other than 0: it dials rank 0 until it
// answers, and presents the reason in its hello.
func (r *Rendezvous) abortAsJoiner(ctx context.Context, reason string) error {
	cfg := r.cfg
	var d net.Dialer
	if cfg.BindAddr != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(cfg.BindAddr)}
	}
	var last error
	for {
		err := r.abortOnce(ctx, &d, reason)
		var ab *AbortedError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ab):
			// Rank 0 answers a rank that aborts with the verdict it gives
			// everyone (ours, another rank's that failed first, or its
			// own): it has heard us either way.
			return nil
		case !errors.Is(err, errNoChallenge) && !errors.Is(err, errNotUp):
			return fmt.Errorf("rendezvous: rank %d: tell rank 0 at %s why this rank failed: %w", cfg.Rank, cfg.masterHostPort(), err)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("rendezvous: rank %d: rank 0 at %s did not answer within the timeout (%v) to hear why this rank failed: %w", cfg.Rank, cfg.masterHostPort(), cfg.Timeout, last)
		case <-time.After(100 * time.Millisecond): // rank 0 may not be listening yet
		}
	}
}

// errNotUp marks a dial that found nothing listening (yet).
var errNotUp = errors.New("rank 0 is not listening")

// abortOnce is one try of abortAsJoiner.
func (r *Rendezvous) abortOnce(ctx context.Context, d *net.Dialer, reason string) error {
	cfg := r.cfg
	c, err := d.DialContext(ctx, "tcp", cfg.masterHostPort())
	if err != nil {
		return fmt.Errorf("%w: %w", errNotUp, err)
	}
	raw := c
	defer raw.Close()
	raw.SetDeadline(handshakeDeadline(cfg.Timeout))
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if c, err = r.clientConn(ctx, c); err != nil {
		return err
	}
	nonceA, err := r.challenge(c)
	if err != nil {
		return err
	}
	h := wire.Hello{Rank: cfg.Rank, Size: cfg.Size, Host: HostID(), DataAddr: "-:0", Abort: reason}
	// Rank 0 answers at once, then holds the connection until every rank
	// has heard why (tell): wait for that, within the timeout.
	if deadline, ok := ctx.Deadline(); ok {
		raw.SetDeadline(deadline)
	}
	_, err = r.answer(c, h, wire.KindTable, nonceA)
	if err == nil {
		return errors.New("rank 0 sent the address table to a rank that failed")
	}
	var ab *AbortedError
	if errors.As(err, &ab) {
		awaitClose(c)
	}
	return err
}
