package rendezvous

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// Split is how tcp, shm and nccl build a sub-group (collective.Splitter):
// a new rendezvous among the sub-group's members, with rv's token, TLS,
// addresses and timeout. The sub-group's rank 0 listens on a fresh port
// and every rank of the parent learns its leader's address through parent,
// the parent's own group (every parent rank calls Split, members of no
// sub-group included); then the members meet as a job of their own would.
// Ranks in the result are those of l (0..len(l.Members)-1). A rank of no
// sub-group gets nil.
func Split(ctx context.Context, rv *Rendezvous, parent collective.Collective, l collective.Layout) (*Rendezvous, error) {
	cfg := rv.cfg
	var ln net.Listener
	blob := ""
	if l.Rank == 0 && len(l.Members) > 1 {
		host, _, err := net.SplitHostPort(rv.Addr(rv.Rank()))
		if err == nil {
			ln, err = net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, "0"))
		}
		if err != nil {
			blob = "!" + err.Error()
		} else {
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			blob = net.JoinHostPort(host, port)
		}
	}
	blobs, err := allGatherBytes(ctx, parent, []byte(blob))
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("rendezvous: split: exchange the sub-groups' addresses: %w", err)
	}
	if l.Members == nil {
		return nil, nil
	}
	sub := cfg
	sub.Rank, sub.Size, sub.Listener, sub.MasterAddr, sub.MasterPort = l.Rank, len(l.Members), ln, "", 0
	if len(l.Members) > 1 {
		lead := string(blobs[l.Members[0]])
		if msg, bad := strings.CutPrefix(lead, "!"); bad {
			return nil, fmt.Errorf("rendezvous: split: rank %d, the sub-group's first rank, could not listen for it: %s", l.Members[0], msg)
		}
		host, port, err := net.SplitHostPort(lead)
		if err != nil {
			return nil, fmt.Errorf("rendezvous: split: rank %d announced a bad address %q", l.Members[0], lead)
		}
		sub.MasterAddr = host
		sub.MasterPort, _ = strconv.Atoi(port)
	}
	lg := cfg.Logger.With().Ints("sub_group", l.Members).Logger()
	sub.Logger = &lg
	r, err := Meet(ctx, sub)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: split: the sub-group of parent ranks %v did not meet: %w", l.Members, err)
	}
	return r, nil
}

// allGatherBytes gives every rank of c every rank's blob (index = rank),
// a byte per float64: split exchanges only a few addresses.
func allGatherBytes(ctx context.Context, c collective.Collective, blob []byte) ([][]byte, error) {
	n := c.Size()
	lens := make([]float64, n)
	if err := c.AllGather(ctx, []float64{float64(len(blob))}, lens); err != nil {
		return nil, err
	}
	longest := 0
	for _, l := range lens {
		longest = max(longest, int(l))
	}
	send := make([]float64, longest)
	for i, b := range blob {
		send[i] = float64(b)
	}
	recv := make([]float64, n*longest)
	if err := c.AllGather(ctx, send, recv); err != nil {
		return nil, err
	}
	out := make([][]byte, n)
	for r := range out {
		out[r] = make([]byte, int(lens[r]))
		for i := range out[r] {
			out[r][i] = byte(recv[r*longest+i])
		}
	}
	return out, nil
}

// SplitGroup implements collective.Splitter.Split for a backend built over
// a rendezvous: collective.SplitWith over parent (the backend's own group,
// met through rv), then Split for the sub-group's rendezvous, then open to
// build the backend's group over it. open owns the rendezvous once it
// returns a group; on its error the rendezvous is closed.
func SplitGroup(ctx context.Context, rv *Rendezvous, parent collective.Collective, color, key int, open func(context.Context, *Rendezvous) (collective.Collective, error)) (collective.Collective, error) {
	return collective.SplitWith(ctx, parent, color, key, func(ctx context.Context, l collective.Layout) (collective.Collective, error) {
		sub, err := Split(ctx, rv, parent, l)
		if err != nil || sub == nil {
			return nil, err
		}
		g, err := open(ctx, sub)
		if err != nil {
			sub.Close()
			return nil, err
		}
		return g, nil
	})
}
