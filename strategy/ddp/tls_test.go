package ddp_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
)

// tlsFiles writes a CA and one certificate signed by it, good for every
// rank of a job on this host, and returns the environment that turns TLS on.
func tlsFiles(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, kind string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, key := newKey(), newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "job CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "rank"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return []string{
		rendezvous.TLSCertEnv + "=" + write("rank.pem", "CERTIFICATE", der),
		rendezvous.TLSKeyEnv + "=" + write("rank.key", "EC PRIVATE KEY", keyDER),
		rendezvous.TLSCAEnv + "=" + write("ca.pem", "CERTIFICATE", caDER),
	}
}

// Rank 0's log says that the ranks' connections run TLS when the job has
// it, whether auto chose the backend or the user named one, and says
// nothing of TLS when it does not.
func TestDDPLogSaysTLS(t *testing.T) {
	needLinux(t)
	certs := tlsFiles(t)
	for _, tc := range []struct {
		backend string
		tls     bool
		want    string // in rank 0's output
	}{
		{"auto", true, "FULGUR_BACKEND=auto: shared memory between the 2 ranks (every one on this host; FULGUR_BACKEND=tcp to use sockets); the rendezvous connections run TLS 1.3"},
		{"tcp", true, "FULGUR_BACKEND=tcp: every connection between the ranks runs TLS 1.3, each rank authenticated by a certificate of the job's CA (FULGUR_TLS_CA)"},
		{"auto", false, "FULGUR_BACKEND=auto: shared memory between the 2 ranks"},
	} {
		env := []string{"FULGUR_BACKEND=" + tc.backend}
		if tc.tls {
			env = append(env, certs...)
		}
		r := startProgram(t, newMarker(t), env, "-strategy", "ddp", "-devices", "2", "-log-stderr")
		if r.err != nil {
			t.Fatalf("%s, TLS %v: %v\n%s", tc.backend, tc.tls, r.err, r.stderr)
		}
		if n := strings.Count(r.stderr, tc.want); n != 1 {
			t.Errorf("%s, TLS %v: rank 0's output says %d times %q:\n%s", tc.backend, tc.tls, n, tc.want, r.stderr)
		}
		if !tc.tls && strings.Contains(r.stderr, "TLS") {
			t.Errorf("%s without TLS: the output speaks of TLS:\n%s", tc.backend, r.stderr)
		}
	}
}
