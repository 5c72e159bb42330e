package rendezvous

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// The variables launchers read for TLS (TLSFromEnv): this rank's
// certificate and key, and the job's certificate authority, as PEM files.
const (
	TLSCertEnv = "FULGUR_TLS_CERT"
	TLSKeyEnv  = "FULGUR_TLS_KEY"
	TLSCAEnv   = "FULGUR_TLS_CA"
)

// TLS is this rank's certificate and the job's certificate authority. With
// Config.TLS set, every connection the rendezvous makes (the star to rank 0
// and the data connections of DialPeer/AcceptPeer) runs TLS 1.3 with mutual
// authentication: each side must present a certificate signed by the CA, or
// the connection is refused and logged. Host names are not checked (ranks
// dial addresses, and the CA is the job's identity), so certificates must
// allow both client and server authentication. The token handshake still
// runs inside TLS.
type TLS struct {
	server, client *tls.Config
}

// NewTLS builds a TLS from this rank's certificate and the CA pool that
// signs every rank's certificate.
func NewTLS(cert tls.Certificate, ca *x509.CertPool) (*TLS, error) {
	if len(cert.Certificate) == 0 {
		return nil, errors.New("rendezvous.NewTLS: the certificate is empty")
	}
	if ca == nil {
		return nil, errors.New("rendezvous.NewTLS: no CA pool: pass the pool that signs every rank's certificate")
	}
	server := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca,
	}
	client := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// The chain is verified below, against the CA and without a host
		// name: ranks dial addresses the rendezvous handed out.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the peer presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			return err
		},
	}
	return &TLS{server: server, client: client}, nil
}

// LoadTLS reads this rank's certificate and key and the job's CA from PEM
// files.
func LoadTLS(certFile, keyFile, caFile string) (*TLS, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: TLS certificate %s with key %s: %w", certFile, keyFile, err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: TLS CA: %w", err)
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("rendezvous: TLS CA %s holds no PEM certificate", caFile)
	}
	return NewTLS(cert, ca)
}

// TLSFromEnv reads FULGUR_TLS_CERT, FULGUR_TLS_KEY and FULGUR_TLS_CA
// through lookup: all three set load a TLS, none set returns nil (no TLS),
// anything between is an error naming what is missing.
func TLSFromEnv(lookup func(string) (string, bool)) (*TLS, error) {
	names := []string{TLSCertEnv, TLSKeyEnv, TLSCAEnv}
	vals := make([]string, len(names))
	var set, missing []string
	for i, n := range names {
		v, _ := lookup(n)
		vals[i] = strings.TrimSpace(v)
		if vals[i] == "" {
			missing = append(missing, n)
		} else {
			set = append(set, n)
		}
	}
	if len(set) == 0 {
		return nil, nil
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s set but %s not: TLS needs this rank's certificate, its key and the job's CA (PEM files), or none of them", strings.Join(set, ", "), strings.Join(missing, ", "))
	}
	return LoadTLS(vals[0], vals[1], vals[2])
}

// serverConn runs the accepting side's TLS handshake on c when TLS is on.
func (r *Rendezvous) serverConn(c net.Conn) (net.Conn, error) {
	if r.cfg.TLS == nil {
		return c, nil
	}
	tc := tls.Server(c, r.cfg.TLS.server)
	if err := tc.HandshakeContext(context.Background()); err != nil {
		return nil, fmt.Errorf("%w: %w (%s)", errTLSHandshake, err, serverTLSHint)
	}
	return tc, nil
}

// errTLSHandshake marks a dialer that failed the accepting side's TLS
// handshake.
var errTLSHandshake = errors.New("TLS handshake")

// serverTLSHint says what a TLS failure seen by the acceptor most likely
// means.
const serverTLSHint = "a rank whose certificate is not signed by the job's CA, or one without TLS: give every rank " + TLSCertEnv + ", " + TLSKeyEnv + " and the same " + TLSCAEnv

// clientConn runs the dialing side's TLS handshake on c when TLS is on.
func (r *Rendezvous) clientConn(ctx context.Context, c net.Conn) (net.Conn, error) {
	if r.cfg.TLS == nil {
		return c, nil
	}
	tc := tls.Client(c, r.cfg.TLS.client)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w (%s)", err, tlsHint(err))
	}
	return tc, nil
}

// tlsHint says what a TLS failure seen by the dialer most likely means.
func tlsHint(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "does not look like a TLS handshake"):
		return "the peer does not use TLS: give every rank the same " + TLSCertEnv + ", " + TLSKeyEnv + " and " + TLSCAEnv
	case strings.Contains(s, "remote error"):
		return "the peer refused our certificate: it must be signed by the job's CA (" + TLSCAEnv + ")"
	}
	return "the peer's certificate must be signed by the job's CA (" + TLSCAEnv + ")"
}
