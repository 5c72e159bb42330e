package rendezvous_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
)

// TLSFromEnv: none set is no TLS; some set is an error naming what is
// missing; unreadable files are errors naming the file.
func TestTLSFromEnv(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" : no error, no TLS
	}{
		{"none", nil, ""},
		{"cert only", map[string]string{rendezvous.TLSCertEnv: junk}, "FULGUR_TLS_KEY, FULGUR_TLS_CA not"},
		{"no CA", map[string]string{rendezvous.TLSCertEnv: junk, rendezvous.TLSKeyEnv: junk}, "FULGUR_TLS_CA not"},
		{"missing file", map[string]string{rendezvous.TLSCertEnv: filepath.Join(dir, "nope.pem"), rendezvous.TLSKeyEnv: junk, rendezvous.TLSCAEnv: junk}, "nope.pem"},
		{"junk", map[string]string{rendezvous.TLSCertEnv: junk, rendezvous.TLSKeyEnv: junk, rendezvous.TLSCAEnv: junk}, "junk.pem"},
	} {
		got, err := rendezvous.TLSFromEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		switch {
		case tc.want == "" && (err != nil || got != nil):
			t.Errorf("%s: got %v, %v; want no TLS and no error", tc.name, got, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v; want an error naming %q", tc.name, err, tc.want)
		}
	}
}
