package tcp_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/collectivetest"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
	"github.com/rs/zerolog"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue signs a certificate for one rank, good for both ends of a
// connection.
func (ca *testCA) issue(t testing.TB, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *testCA) tls(t testing.TB, cert tls.Certificate) *rendezvous.TLS {
	t.Helper()
	c, err := rendezvous.NewTLS(cert, ca.pool)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// meetAll runs the rendezvous of cfgs side by side.
func meetAll(t *testing.T, cfgs []rendezvous.Config) []*rendezvous.Rendezvous {
	t.Helper()
	rvs := make([]*rendezvous.Rendezvous, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for r := range cfgs {
		wg.Add(1)
		go func() { defer wg.Done(); rvs[r], errs[r] = rendezvous.Meet(context.Background(), cfgs[r]) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return rvs
}

// ringAll builds the TCP ring over rvs side by side and checks one
// all-reduce.
func ringAll(t *testing.T, rvs []*rendezvous.Rendezvous) {
	t.Helper()
	gs := make([]collective.Group, len(rvs))
	errs := make([]error, len(rvs))
	var wg sync.WaitGroup
	for r := range rvs {
		wg.Add(1)
		go func() { defer wg.Done(); gs[r], errs[r] = tcp.NewGroup(context.Background(), rvs[r]) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: ring: %v", r, err)
		}
	}
	bufs := make([][]float32, len(gs))
	for r, g := range gs {
		defer g.Close()
		bufs[r] = []float32{float32(r + 1), 10}
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = g.AllReduce(context.Background(), bufs[r], collective.Sum) }()
	}
	wg.Wait()
	want := float32(len(gs) * (len(gs) + 1) / 2)
	for r := range gs {
		if errs[r] != nil || bufs[r][0] != want || bufs[r][1] != float32(10*len(gs)) {
			t.Fatalf("rank %d: all-reduce gave %v (%v), want [%v %v]", r, bufs[r], errs[r], want, 10*len(gs))
		}
	}
}

func rendezvousConfigs(t *testing.T, n int, logs []*syncBuf) []rendezvous.Config {
	var cfgs []rendezvous.Config
	for r, c := range configs(t, n) {
		l := zerolog.New(logs[r])
		c.Logger = &l
		cfgs = append(cfgs, c.Rendezvous())
	}
	return cfgs
}

// Garbage, silence and strangers at a rank's data port (the ring's
// listener, open between the rendezvous and the ring) are refused and
// logged; the ring forms and reduces. The handshakes run side by side, so
// the silent stranger, first in the queue, does not hold the real neighbour
// back for the handshake timeout (3 s here, also the ring's whole timeout).
func TestGarbageAtDataPortRefused(t *testing.T) {
	logs := []*syncBuf{{}, {}, {}}
	cfgs := rendezvousConfigs(t, 3, logs)
	for r := range cfgs {
		cfgs[r].Timeout = 3 * time.Second
	}
	rvs := meetAll(t, cfgs)
	var garbage []net.Conn
	for r := range rvs {
		silent, err := net.Dial("tcp", rvs[r].Addr(r))
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
		g, err := net.Dial("tcp", rvs[r].Addr(r))
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		g.Write([]byte("GET / HTTP/1.1\r\nHost: fulgur\r\n\r\n\x00\xff garbage"))
		garbage = append(garbage, g)
	}
	ringAll(t, rvs)
	for r, g := range garbage {
		g.SetDeadline(time.Now().Add(30 * time.Second))
		io.Copy(io.Discard, g) // until the rank closes it, after logging the refusal
		if !strings.Contains(logs[r].String(), "refused connection at data port") || !strings.Contains(logs[r].String(), "bad magic") {
			t.Errorf("rank %d's log does not record refusing the garbage: %q", r, logs[r].String())
		}
	}
}

// With TLS, a peer without a certificate signed by the job's CA is refused
// with an error that says so, at the rendezvous and at a data port, and the
// job goes on: it forms its ring and reduces.
func TestTLSRefusesPeersWithoutValidCertificate(t *testing.T) {
	ca, other := newCA(t, "job CA"), newCA(t, "another CA")
	logs := []*syncBuf{{}, {}}
	cfgs := rendezvousConfigs(t, 2, logs)
	for r := range cfgs {
		cfgs[r].TLS = ca.tls(t, ca.issue(t, "rank"))
	}
	type result struct {
		rv  *rendezvous.Rendezvous
		err error
	}
	rank0 := make(chan result, 1)
	go func() {
		rv, err := rendezvous.Meet(context.Background(), cfgs[0])
		rank0 <- result{rv, err}
	}()
	nop := zerolog.Nop()
	for _, s := range []struct {
		name string
		tls  *rendezvous.TLS
		want string
	}{
		{"a certificate from another CA", ca.tls(t, other.issue(t, "stranger")), "refused our certificate"},
		{"no TLS at all", nil, "the program there speaks TLS, as a fulgur rank 0 of a job with TLS does, and this rank has none: set FULGUR_TLS_CERT"},
	} {
		stranger := cfgs[1]
		stranger.TLS, stranger.Logger, stranger.Timeout = s.tls, &nop, 2*time.Second
		_, err := rendezvous.Meet(context.Background(), stranger)
		if err == nil || !strings.Contains(err.Error(), s.want) || strings.Contains(err.Error(), "another program") {
			t.Fatalf("a joiner with %s: got %v, want a refusal saying %q (and not blaming another program)", s.name, err, s.want)
		}
		t.Logf("a joiner with %s: %v", s.name, err)
	}
	rv1, err := rendezvous.Meet(context.Background(), cfgs[1])
	if err != nil {
		t.Fatalf("rank 1 after the strangers: %v", err)
	}
	r0 := <-rank0
	if r0.err != nil {
		t.Fatalf("rank 0 after the strangers: %v", r0.err)
	}
	rvs := []*rendezvous.Rendezvous{r0.rv, rv1}

	// At rank 1's data port: a TLS client with another CA's certificate. It
	// waits in the listener's queue until the ring starts accepting.
	raw, err := net.Dial("tcp", rv1.Addr(1))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	strangerErr := make(chan error, 1)
	go func() {
		raw.SetDeadline(time.Now().Add(30 * time.Second))
		c := tls.Client(raw, &tls.Config{Certificates: []tls.Certificate{other.issue(t, "stranger")}, InsecureSkipVerify: true})
		err := c.Handshake()
		if err == nil {
			_, err = c.Read(make([]byte, 1))
		}
		io.Copy(io.Discard, raw) // until rank 1 closes it, after logging the refusal
		strangerErr <- err
	}()
	ringAll(t, rvs)
	if err := <-strangerErr; err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a data connection with another CA's certificate: got %v, want a refusal naming the certificate", err)
	}
	if l := logs[1].String(); !strings.Contains(l, "refused connection at data port") || !strings.Contains(l, "certificate") {
		t.Errorf("rank 1's log does not record the TLS refusal at its data port: %q", l)
	}
}

// The conformance suite, faults included, over TLS.
func TestTLSConformance(t *testing.T) {
	ca := newCA(t, "job CA")
	cert := ca.tls(t, ca.issue(t, "rank"))
	collectivetest.RunAll(t, func(t *testing.T, n int) []collective.Collective {
		cfgs := configs(t, n)
		for r := range cfgs {
			cfgs[r].TLS = cert
		}
		return build(t, cfgs)
	})
}

// The rendezvous of a TLS job carries TLS records, not fulgur frames in
// clear.
func TestTLSHidesFrames(t *testing.T) {
	ca := newCA(t, "job CA")
	cfgs := configs(t, 3)
	for r := range cfgs {
		cfgs[r].TLS = ca.tls(t, ca.issue(t, "rank"))
	}
	rec := &recordingListener{Listener: cfgs[0].Listener}
	cfgs[0].Listener = rec
	cs := build(t, cfgs)
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for r, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = c.Barrier(context.Background()) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: barrier over TLS: %v", r, err)
		}
	}
	if w := rec.bytes(); len(w) < 200 || strings.Contains(string(w), "FLG1") {
		t.Errorf("the rendezvous traffic (%d bytes) shows fulgur frames in clear under TLS", len(w))
	}
}

// A rank whose certificate rank 0 refuses never joins: when rank 0 then
// times out, its error says that a process came and failed the TLS
// handshake, and what every rank needs, rather than asking whether the
// ranks were started.
func TestRankZeroNamesATLSRefusalAtTheTimeout(t *testing.T) {
	ca, other := newCA(t, "job CA"), newCA(t, "another CA")
	logs := []*syncBuf{{}, {}}
	cfgs := rendezvousConfigs(t, 2, logs)
	cfgs[0].TLS = ca.tls(t, ca.issue(t, "rank 0"))
	cfgs[0].Timeout = 2 * time.Second
	zero := make(chan error, 1)
	go func() {
		_, err := rendezvous.Meet(context.Background(), cfgs[0])
		zero <- err
	}()
	cfgs[1].TLS = ca.tls(t, other.issue(t, "rank 1"))
	if _, err := rendezvous.Meet(context.Background(), cfgs[1]); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("rank 1, whose certificate another CA signed: got %v, want a refusal naming the certificate", err)
	}
	err := <-zero
	for _, want := range []string{"ranks [1] did not join", "and failed: TLS handshake", "FULGUR_TLS_CERT", "FULGUR_TLS_CA"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank 0's error %v lacks %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "were they started") {
		t.Errorf("rank 0's error %v asks whether a rank that came was started", err)
	}
	if l := logs[0].String(); !strings.Contains(l, "FULGUR_TLS_CA") {
		t.Errorf("rank 0's log of the refusal does not say what every rank needs: %q", l)
	}
}
