package ddp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/hier"
	"github.com/fulgur-ml/fulgur/strategy/collective/inproc"
	"github.com/fulgur-ml/fulgur/strategy/collective/nccl"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/shm"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// Variables read (through Options.Lookup) by the "ddp" and "ddp_spawn"
// strategies built by name (and by those built over "ddp": "fsdp",
// "sharded").
const (
	// EnvBackend picks the collective backend between processes: "auto"
	// (the default: shared memory when every rank is on this host, else
	// tcp; rank 0 logs which), "tcp", "shm", "hier" (shared memory inside each host, tcp
	// across them: strategy/collective/hier), "mpi" or "nccl".
	EnvBackend = "FULGUR_BACKEND"
	// EnvBucketMB is DDP's gradient bucket cap in MiB (default 25).
	EnvBucketMB = "FULGUR_BUCKET_MB"
	// EnvOverlap set to 0 (or false) reduces DDP's gradient buckets only
	// after the backward pass (DDPConfig.NoOverlap); 1 or unset: during it.
	EnvOverlap = "FULGUR_DDP_OVERLAP"
	// EnvTimeout bounds the wait for a silent peer, as a Go duration
	// ("90s"); default collective.DefaultTimeout.
	EnvTimeout = "FULGUR_TIMEOUT"
	// EnvSocketIfname names the network interface (as GLOO_SOCKET_IFNAME
	// and NCCL_SOCKET_IFNAME do) whose address this rank listens on and
	// announces to the others, for hosts with several networks. Default:
	// every interface, announcing the address that reaches rank 0.
	EnvSocketIfname = "FULGUR_SOCKET_IFNAME"
	// EnvGlooSocketIfname is PyTorch's name for EnvSocketIfname, read when
	// that is unset, so that a job script written for torchrun or Lightning
	// does not have its interface silently ignored.
	EnvGlooSocketIfname = "GLOO_SOCKET_IFNAME"
)

func init() {
	strategy.Register("ddp", func(o strategy.Options) (strategy.Strategy, error) { return ddpFromOptions(o, "ddp") })
	strategy.Register("ddp_spawn", func(o strategy.Options) (strategy.Strategy, error) { return ddpFromOptions(o, "ddp_spawn") })
}

// knobs are the settings distributed strategies read from the environment.
type knobs struct {
	backend     string
	bucketBytes int
	noOverlap   bool
	timeout     time.Duration
	sockAddr    string          // the address of EnvSocketIfname's interface
	tls         *rendezvous.TLS // from FULGUR_TLS_CERT, _KEY, _CA; nil: none
}

func readKnobs(lookup func(string) (string, bool)) (knobs, error) {
	var k knobs
	var errs []error
	k.backend, _ = lookup(EnvBackend)
	k.backend = strings.ToLower(strings.TrimSpace(k.backend))
	switch k.backend {
	case "", "auto", "tcp", "shm", "hier", "mpi", "nccl":
	case "inproc":
		errs = append(errs, fmt.Errorf("%s=inproc: the in-process backend joins goroutines, not processes: build DDP with DDPConfig.Group from inproc.NewGroup instead, or use tcp, shm or auto", EnvBackend))
	default:
		errs = append(errs, fmt.Errorf("%s=%q: use auto, tcp, shm, hier (shared memory inside each host, tcp across), mpi (a binary built with -tags mpi, launched by mpirun or srun) or nccl", EnvBackend, k.backend))
	}
	if v, ok := lookup(EnvBucketMB); ok && v != "" {
		mb, err := strconv.ParseFloat(v, 64)
		if err != nil || !(mb > 0) {
			errs = append(errs, fmt.Errorf("%s=%q: use a positive number of MiB, e.g. 25", EnvBucketMB, v))
		} else {
			k.bucketBytes = max(int(mb*(1<<20)), 4)
		}
	}
	if v, ok := lookup(EnvOverlap); ok && v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: use 1 (reduce gradient buckets during the backward pass, the default) or 0 (after it)", EnvOverlap, v))
		}
		k.noOverlap = err == nil && !on
	}
	if v, ok := lookup(EnvTimeout); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: use a positive Go duration such as 90s or 5m", EnvTimeout, v))
		} else {
			k.timeout = d
		}
	}
	ifVar := EnvSocketIfname
	v, _ := lookup(EnvSocketIfname)
	if strings.TrimSpace(v) == "" {
		ifVar = EnvGlooSocketIfname
		v, _ = lookup(EnvGlooSocketIfname)
	}
	if strings.TrimSpace(v) != "" {
		addr, err := interfaceAddr(ifVar, strings.TrimSpace(v))
		if err != nil {
			errs = append(errs, err)
		}
		k.sockAddr = addr
	}
	var err error
	if k.tls, err = rendezvous.TLSFromEnv(lookup); err != nil {
		errs = append(errs, err)
	}
	return k, errors.Join(errs...)
}

// interfaceAddr returns the first IPv4 address (else IPv6) of the network
// interface named name (by the variable envVar), with an error that lists
// this host's interfaces.
func interfaceAddr(envVar, name string) (string, error) {
	ifs, _ := net.Interfaces()
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	if first, _, list := strings.Cut(name, ","); list {
		// Gloo and NCCL take a list; a copied setting names the first
		// interface too, which the error below would list as present.
		return "", fmt.Errorf("%s=%q is a list: fulgur listens on one interface; give one name, such as %s=%s (this host has %s)", envVar, name, envVar, strings.TrimSpace(first), strings.Join(names, ", "))
	}
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return "", fmt.Errorf("%s=%q: no such network interface on this host (it has %s)", envVar, name, strings.Join(names, ", "))
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", fmt.Errorf("%s=%q: read its addresses: %w", envVar, name, err)
	}
	var v6 string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			return ipn.IP.String(), nil
		}
		if v6 == "" {
			v6 = ipn.IP.String()
		}
	}
	if v6 != "" {
		return v6, nil
	}
	return "", fmt.Errorf("%s=%q: the interface has no usable IP address (is it up?); this host has %s", envVar, name, strings.Join(names, ", "))
}

// worldFromOptions is Devices × NumNodes, with Devices -1 resolved to the
// number of devices of the accelerator on this machine.
func worldFromOptions(o strategy.Options) (perNode int, err error) {
	perNode = o.Devices
	if perNode == -1 {
		devs, err := device.Open(o.Accelerator, -1)
		if err != nil {
			return 0, err
		}
		perNode = len(devs)
	}
	return perNode, nil
}

func localDevice(accel string, localRank int) (device.Device, error) {
	devs, err := device.Open(accel, localRank+1)
	if err != nil {
		return nil, err
	}
	return devs[localRank], nil
}

// ddpFromOptions builds DDP (or DDP-spawn) for this process: a rank of the
// job described by the launcher's environment, or, with none, the rank 0
// that starts the local ranks itself.
func ddpFromOptions(o strategy.Options, name string) (strategy.Strategy, error) {
	k, err := readKnobs(o.Lookup)
	if err != nil {
		return nil, fmt.Errorf("strategy %q: %w", name, err)
	}
	perNode, err := worldFromOptions(o)
	if err != nil {
		return nil, fmt.Errorf("strategy %q: %w", name, err)
	}
	env, found, err := cluster.Detect(cluster.Lookup(o.Lookup))
	if err != nil {
		return nil, fmt.Errorf("strategy %q: %w", name, err)
	}
	if found {
		return joinFromEnv(o, name, k, env, perNode)
	}
	if o.NumNodes > 1 {
		return nil, fmt.Errorf("strategy %q: %s is %d but this process was not started by a launcher: on every node run \"fulgur run -nnodes %d -node-rank <the node's index> -nproc %d -master-addr <node 0's address> PROGRAM ARGS\" with the same FULGUR_TOKEN, or start one process per device on every node with torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), mpirun or srun", name, o.Name("NumNodes"), o.NumNodes, o.NumNodes, perNode)
	}
	if name == "ddp_spawn" {
		return newSpawnParent(o, perNode)
	}
	dev, err := localDevice(o.Accelerator, 0)
	if err != nil {
		return nil, fmt.Errorf("strategy %q: %w", name, err)
	}
	cfg := DDPConfig{Rank: 0, WorldSize: perNode, Device: dev, BucketBytes: k.bucketBytes, NoOverlap: k.noOverlap, Timeout: k.timeout, Log: o.Log}
	if perNode == 1 {
		g, _ := inproc.NewGroup(1)
		cfg.Group = g[0]
		d, err := NewDDP(cfg)
		if err != nil {
			return nil, err
		}
		d.name = name
		return d, nil
	}
	l := &launcher{world: perNode, failed: make(chan struct{}), ended: make(chan struct{}), log: o.Log, logDir: o.LogDir, linger: k.timeout}
	if l.elastic, err = launch.ElasticFromEnv(o.Lookup, perNode, o.Log); err != nil {
		return nil, fmt.Errorf("strategy %q: %w", name, err)
	}
	if l.elastic != nil {
		l.elastic.RunDir = o.LogDir // every rank of every attempt runs there
	}
	if l.masterPort, err = launch.MasterPortFromEnv(o.Lookup); err != nil {
		return nil, fmt.Errorf("strategy %q: %w", name, err)
	}
	if l.linger == 0 {
		l.linger = collective.DefaultTimeout
	}
	cfg.Connect = func(ctx context.Context) (collective.Collective, error) {
		if l.ln == nil {
			return nil, errors.New("the local ranks were not started: the trainer calls Launch before Setup")
		}
		env := cluster.Env{WorldSize: perNode, LocalWorldSize: perNode, NumNodes: 1, MasterAddr: "127.0.0.1", MasterPort: l.port}
		return connect(ctx, k, env, l.token, l.ln, o.Log)
	}
	d, err := NewDDP(cfg)
	if err != nil {
		return nil, err
	}
	d.name = name
	d.launch = l
	d.localRanks = perNode
	return d, nil
}

func joinFromEnv(o strategy.Options, name string, k knobs, env cluster.Env, perNode int) (strategy.Strategy, error) {
	if want := perNode * o.NumNodes; want != 1 && want != env.WorldSize && !launch.Shrunk(o.Lookup, env.WorldSize, want) {
		who := "the " + env.Source + " launcher"
		if v, _ := o.Lookup(launch.EnvLauncher); v == "elastic" {
			who = "fulgur run" // its ranks carry torchrun's variables
		}
		return nil, fmt.Errorf("strategy %q: %s started %d processes, but %s × %s is %d × %d = %d: make them agree (one process per device)", name, who, env.WorldSize, o.Name("Devices"), o.Name("NumNodes"), perNode, o.NumNodes, want)
	}
	dev, err := localDevice(o.Accelerator, env.LocalRank)
	if err != nil {
		return nil, fmt.Errorf("strategy %q: rank %d: %w", name, env.Rank, err)
	}
	if v, _ := o.Lookup(launch.EnvLauncher); v == "ddp" {
		// Started by a rank 0 that lets its ranks finish (Config.Linger).
		linger := k.timeout
		if linger == 0 {
			linger = collective.DefaultTimeout
		}
		launch.WatchParent(o.Lookup, linger)
	}
	token, _ := o.Lookup(launch.EnvToken)
	var ln net.Listener
	if env.Rank == 0 {
		if ln, err = launch.InheritedListener(o.Lookup); err != nil {
			return nil, fmt.Errorf("strategy %q: %w", name, err)
		}
	}
	cfg := DDPConfig{
		Rank: env.Rank, WorldSize: env.WorldSize, Device: dev, BucketBytes: k.bucketBytes, NoOverlap: k.noOverlap, Timeout: k.timeout, Log: o.Log,
		Connect: func(ctx context.Context) (collective.Collective, error) {
			return connect(ctx, k, env, token, ln, o.Log)
		},
	}
	if env.WorldSize == 1 {
		g, _ := inproc.NewGroup(1)
		cfg.Group, cfg.Connect = g[0], nil
	}
	d, err := NewDDP(cfg)
	if err != nil {
		return nil, err
	}
	d.name = name
	d.localRanks = env.LocalWorldSize
	if v, _ := o.Lookup(launch.EnvLauncher); name == "ddp_spawn" && v == "ddp_spawn" {
		path, _ := o.Lookup(launch.EnvResult)
		return &spawnWorker{DDP: d, resultPath: path}, nil
	}
	return d, nil
}

// connect joins the group of env over the chosen backend.
func connect(ctx context.Context, k knobs, env cluster.Env, token string, ln net.Listener, log zerolog.Logger) (collective.Collective, error) {
	joining.Store(true)
	cfg := tcp.Config{
		Rank: env.Rank, Size: env.WorldSize, MasterAddr: env.MasterAddr, MasterPort: env.MasterPort,
		Token: token, Listener: ln, Timeout: k.timeout, Logger: &log, TLS: k.tls,
	}
	if k.backend == "mpi" {
		return connectMPI(env)
	}
	if k.sockAddr != "" {
		cfg.BindAddr, cfg.AdvertiseAddr = k.sockAddr, k.sockAddr
	}
	if cfg.Token == "" && env.WorldSize > 1 {
		return nil, fmt.Errorf("%s is not set: give every rank the same secret (e.g. export %s=$(openssl rand -hex 16)) so strangers cannot join the job", launch.EnvToken, launch.EnvToken)
	}
	if k.backend == "tcp" {
		g, err := tcp.New(ctx, cfg)
		if err == nil {
			logTLS(k, env, log)
		}
		return g, err
	}
	rv, err := rendezvous.Meet(ctx, cfg.Rendezvous())
	if err != nil {
		return nil, err
	}
	var g collective.Group
	switch k.backend {
	case "shm":
		g, err = shm.New(ctx, rv)
	case "nccl":
		g, err = nccl.New(ctx, rv, nccl.Config{Device: env.LocalRank, Timeout: k.timeout})
	case "hier":
		g, err = ConnectHier(ctx, rv, env.NodeRank, log)
	default:
		chose := "shm"
		g, err = shm.Auto(ctx, rv, func(ctx context.Context, rv *rendezvous.Rendezvous) (collective.Group, error) {
			chose = "tcp"
			return tcp.NewGroup(ctx, rv)
		})
		if err == nil && env.Rank == 0 {
			log.Info().Str("backend", chose).Int("hosts", hostCount(rv.Hosts())).Msg(autoChoice(chose, rv, k.tls != nil))
		}
	}
	if err != nil {
		rv.Close()
		return nil, err
	}
	if k.backend != "" && k.backend != "auto" { // auto's own line says it
		logTLS(k, env, log)
	}
	return g, nil
}

// logTLS says on rank 0 what runs over TLS in a job that has it and named
// its backend.
func logTLS(k knobs, env cluster.Env, log zerolog.Logger) {
	if env.Rank == 0 && k.tls != nil {
		log.Info().Str("backend", k.backend).Msgf("%s=%s: %s", EnvBackend, k.backend, tlsNote(k.backend))
	}
}

// tlsNote says, for rank 0's log, what runs over TLS when the job has it
// (FULGUR_TLS_CERT, _KEY, _CA): the rendezvous always, the data too
// wherever it goes over sockets.
func tlsNote(backend string) string {
	const auth = "TLS 1.3, each rank authenticated by a certificate of the job's CA (" + rendezvous.TLSCAEnv + ")"
	switch backend {
	case "shm":
		return "the rendezvous connections run " + auth + "; the data moves through shared memory"
	case "nccl":
		return "the rendezvous connections run " + auth + "; the data moves over NCCL, outside it"
	case "hier":
		return "every connection between the ranks runs " + auth + "; inside a host the data moves through shared memory"
	}
	return "every connection between the ranks runs " + auth
}

// autoChoice says which backend FULGUR_BACKEND=auto chose and why, for
// rank 0's log: the one line that tells a user whether the ranks share
// memory or talk over the network.
func autoChoice(chose string, rv *rendezvous.Rendezvous, tls bool) string {
	var s string
	switch {
	case chose == "shm":
		s = fmt.Sprintf("%s=auto: shared memory between the %d ranks (every one on this host; %s=tcp to use sockets)", EnvBackend, rv.Size(), EnvBackend)
	case rv.SameHost():
		s = fmt.Sprintf("%s=auto: tcp between the %d ranks (all on this host, but shared memory is unavailable to them here)", EnvBackend, rv.Size())
	default:
		s = fmt.Sprintf("%s=auto: tcp between the %d ranks on %d hosts (%s=hier shares memory within each host)", EnvBackend, rv.Size(), hostCount(rv.Hosts()), EnvBackend)
	}
	if tls {
		s += "; " + tlsNote(chose)
	}
	return s
}

// hostCount is the number of distinct hosts in hosts.
func hostCount(hosts []string) int {
	seen := map[string]bool{}
	for _, h := range hosts {
		seen[h] = true
	}
	return len(seen)
}

// ConnectHier builds the two-level group of FULGUR_BACKEND=hier: one tcp
// ring over every rank, shared memory among the ranks of each node (tcp
// where they cannot share memory) and tcp rings across the nodes. A node is
// a host and the launcher's node rank (NODE_RANK, GROUP_RANK, SLURM_NODEID)
// together, so two nodes started on one host (network namespaces) stay
// two. A job whose nodes run different numbers of ranks, or one rank each,
// or that runs on one node, connects as under auto (shared memory on one
// host, else one tcp ring), and the log says why. The group returned takes
// rv over (its Close closes rv); on an error rv is still the caller's to
// close. Exported for tools that measure the backend (cmd/bench).
func ConnectHier(ctx context.Context, rv *rendezvous.Rendezvous, nodeRank int, log zerolog.Logger) (collective.Group, error) {
	ids, err := rv.Exchange(ctx, []byte(fmt.Sprintf("%s node %d", rv.Hosts()[rv.Rank()], nodeRank)))
	if err != nil {
		return nil, fmt.Errorf("%s=hier: exchange the ranks' nodes: %w", EnvBackend, err)
	}
	nodes := make([]string, len(ids))
	for r, id := range ids {
		nodes[r] = string(id)
	}
	shape := hier.ShapeOf(nodes)
	if ok, why := shape.Qualifies(); !ok {
		if rv.Rank() == 0 {
			log.Info().Str("layout", shape.String()).Msgf("%s=hier: %s; the ranks connect as under auto", EnvBackend, why)
		}
		return shm.Auto(ctx, rv, tcp.NewGroup)
	}
	flat, err := tcp.NewRing(ctx, rv)
	if err != nil {
		return nil, err
	}
	g, err := hier.New(ctx, flat, shape, func(ctx context.Context, color, key int) (collective.Collective, error) {
		return rendezvous.SplitGroup(ctx, rv, flat, color, key, func(ctx context.Context, sub *rendezvous.Rendezvous) (collective.Collective, error) {
			return shm.Auto(ctx, sub, tcp.NewGroup)
		})
	})
	if err != nil {
		flat.Close()
		return nil, err
	}
	if rv.Rank() == 0 {
		log.Info().Str("layout", shape.String()).Msg("collectives: shared memory inside each host, tcp across hosts")
	}
	return g, nil
}

// launcher starts and watches the local ranks 1..world-1 of a self-launched
// DDP job; this process is rank 0.
type launcher struct {
	world  int
	log    zerolog.Logger
	logDir string         // where rank_N.log go ("": this process's output)
	logs   map[int]string // rank -> its log file
	linger time.Duration  // how long ranks may outlive this process
	// masterPort is the rendezvous port of the local ranks (MASTER_PORT;
	// 0: a free one).
	masterPort int
	ln         net.Listener
	port       int
	token      string
	g          *launch.Group
	// elastic, with FULGUR_MAX_RESTARTS set, makes this process the
	// job's supervisor instead of its rank 0 (launch.Supervise).
	elastic *launch.Elastic

	once   sync.Once
	failed chan struct{} // closed when a rank exits with an error
	// ended is closed when a rank exits, with an error or not: a rank
	// whose program returned early (it printed an error and returned,
	// say) is gone as surely as one that failed.
	endOnce sync.Once
	ended   chan struct{}
}

// Launch starts the local ranks 1..N-1 when this process launched the job
// itself; it does nothing for a rank started by a launcher.
func (d *DDP) Launch(ctx context.Context) (bool, error) {
	if d.launch == nil || d.launch.g != nil {
		return false, nil
	}
	return false, d.launch.start(ctx)
}

func (l *launcher) start(ctx context.Context) error {
	if l.elastic != nil {
		launch.Supervise(ctx, *l.elastic) // FULGUR_MAX_RESTARTS: never returns
	}
	ln, port, err := launch.Loopback(l.masterPort)
	if err != nil {
		return err
	}
	token, err := launch.NewToken()
	if err != nil {
		ln.Close()
		return err
	}
	l.ln, l.port, l.token = ln, port, token
	local := launch.Local{World: l.world, MasterPort: port, Token: token, Launcher: "ddp", RunDir: l.logDir}
	ranks := make([]int, l.world-1)
	for i := range ranks {
		ranks[i] = i + 1
	}
	cfg := launch.Config{Ranks: ranks, Env: local.RankEnv, Linger: l.linger}
	if l.logDir != "" {
		if err := os.MkdirAll(l.logDir, 0o755); err != nil {
			ln.Close()
			return fmt.Errorf("make the directory for the ranks' logs: %w", err)
		}
		l.logs = map[int]string{}
		cfg.Output = func(r int) (*os.File, error) {
			p := filepath.Join(l.logDir, "rank_"+strconv.Itoa(r)+".log")
			l.logs[r] = p
			return os.Create(p)
		}
	}
	// The ranks live until Teardown, not until the context of the Fit
	// that launched them ends: a cancelled Fit reaches them through the
	// ranks' stop agreement, so every rank finishes its step and saves, as
	// on a signal. Ended by the context, they were killed mid-step: rank
	// 0's Fit then failed on its lost peer (an error that did not always
	// wrap context.Canceled) and nothing was saved.
	g, err := launch.Start(context.WithoutCancel(ctx), cfg)
	if err != nil {
		ln.Close()
		return err
	}
	l.g = g
	l.log.Info().Int("world", l.world).Ints("pids", g.Pids()).Str("logs", l.logDir).Msg("started the local ranks (their output: rank_N.log)")
	go func() {
		for {
			select {
			case e := <-g.Exits():
				if e.Err != nil {
					l.once.Do(func() { close(l.failed) })
				}
				l.endOnce.Do(func() { close(l.ended) })
			case <-g.Done():
				return
			}
		}
	}()
	return nil
}

// explain returns why a local rank is gone, waiting up to d for a rank that
// is about to be reaped: the ranks that failed, or else those whose program
// ended normally while the job still needed them; "" when none exited.
func (l *launcher) explain(d time.Duration) string {
	if l == nil || l.g == nil {
		return ""
	}
	select {
	case <-l.ended:
	default:
		if d <= 0 {
			return ""
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-l.ended:
		case <-t.C:
			return ""
		}
	}
	if failed := l.g.Failed(); len(failed) > 0 {
		return l.describe(failed)
	}
	why := l.describe(l.g.Exited())
	if why == "" {
		return ""
	}
	return why + "\n(a rank whose program returns early, after printing an error or without a call the other ranks make, such as Test or WeightsSHA256, leaves them waiting for it)"
}

// describe names each failed rank, its log file and the log's last lines.
func (l *launcher) describe(failed []launch.Exit) string {
	var parts []string
	for _, e := range failed {
		s := e.String()
		if p, ok := l.logs[e.Rank]; ok {
			s += "; its output is in " + p
			if tail := lastLines(p, 5); tail != "" {
				s += ", ending:\n" + tail
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "\n")
}

// lastLines returns the last n lines of the file at path ("" when
// unreadable), reading at most its last 8 KiB.
func lastLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const most = 8 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > most {
		f.Seek(fi.Size()-most, 0)
	}
	b := make([]byte, most)
	k, _ := io.ReadFull(f, b)
	text := strings.TrimRight(string(b[:k]), "\n")
	if strings.TrimSpace(text) == "" {
		return ""
	}
	lines := strings.Split(text, "\n")
	return "\t" + strings.Join(lines[max(0, len(lines)-n):], "\n\t")
}

// connectCtx is cancelled when a local rank fails, so rank 0 stops waiting
// for it at the rendezvous.
func (l *launcher) connectCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if l == nil || l.g == nil {
		return ctx, cancel
	}
	go func() {
		select {
		case <-l.failed:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// wait lets the local ranks finish their program, for at most timeout:
// rank 0 does not kill them mid-write when it is done first.
func (l *launcher) wait(ctx context.Context, timeout time.Duration) error {
	if l == nil || l.g == nil {
		return nil
	}
	if l.ln != nil {
		l.ln.Close()
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var running []int
	select {
	case <-l.g.Done():
	case <-wctx.Done():
		running = l.g.Running()
	}
	err := l.g.Wait(wctx)
	if err == nil {
		return nil
	}
	if wctx.Err() != nil && ctx.Err() == nil {
		where := ""
		if l.logDir != "" {
			where = "; their output is in " + filepath.Join(l.logDir, "rank_N.log")
		}
		names := make([]string, len(running))
		for i, r := range running {
			names[i] = fmt.Sprintf("rank %d", r)
		}
		return fmt.Errorf("local %s still ran %v after rank 0 finished (FULGUR_TIMEOUT), so rank 0 stopped it%s", strings.Join(names, ", "), timeout, where)
	}
	if why := l.describe(l.g.Failed()); why != "" {
		return fmt.Errorf("local ranks: %s", why)
	}
	return err
}
