package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestConsumeKafkaAuth runs `orderly consume` against kfake clusters that
// demand SASL (PLAIN over TLS with a private CA given by --tls-ca,
// SCRAM-SHA-256, SCRAM-SHA-512), with the records produced by franz-go's
// client with the same credentials: every record reaches the endpoint.
// A wrong password ends the run at once: exit 1, one line naming
// --brokers and --sasl-user. (kfake is started directly here: internal/broker has no
// SASL or TLS options.)
func TestConsumeKafkaAuth(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	tests := []struct {
		secure   secureAuth
		name     string
		password string // what consume is given; the cluster's is "s3cret"
	}{
		{secureAuths[0], secureAuths[0].name, "s3cret"},
		{secureAuths[1], secureAuths[1].name, "s3cret"},
		{secureAuths[2], secureAuths[2].name, "s3cret"},
		{secureAuths[1], "wrong password", "guess"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, kopts := tt.secure.start(t, ca, 2, "secure")
			const n = 50
			cl, err := kgo.NewClient(append(kopts, kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("secure"))...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for i := range n {
				if err := cl.ProduceSync(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%5), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			cl.Close()
			ep := newEndpoint(t, 0, func([]hit) (int, http.Header, string) { return http.StatusOK, nil, "" })
			args := []string{"--brokers", c.ListenAddrs()[0], "--topic", "secure", "--group", "auth", "--http", ep.url(),
				"--sasl-mechanism", tt.secure.mechanism, "--sasl-user", "alice", "--progress", "off", "--log-level", "error"}
			if tt.secure.tls {
				args = append(args, "--tls-ca", ca.file)
			}
			if tt.password != "s3cret" {
				r := runBin(t, []string{"ORDERLY_SASL_PASSWORD=" + tt.password}, append([]string{"consume"}, args...)...)
				lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
				// kfake closes the connection on a failed SCRAM exchange
				// (Kafka would answer SASL_AUTHENTICATION_FAILED, which
				// names --sasl-user too): the error says both.
				if r.code != exitError || len(lines) != 1 || !strings.HasPrefix(lines[0], "orderly: --brokers "+c.ListenAddrs()[0]+": group: cannot reach brokers") ||
					!strings.HasSuffix(lines[0], `(or they refused --sasl-user "alice", --sasl-mechanism SCRAM-SHA-256)`) {
					t.Errorf("got exit %d, stderr:\n%s\nwant exit 1 and one line naming --sasl-user", r.code, r.stderr)
				}
				return
			}
			p := startConsumeWith(t, []string{"ORDERLY_SASL_PASSWORD=" + tt.password}, args...)
			p.waitFor(60*time.Second, "every record at the endpoint", func() bool { return ep.okCount() >= n })
			if code := p.stop(syscall.SIGTERM); code != 0 {
				t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
			}
			seen := map[coord]bool{}
			for _, h := range ep.snapshot() {
				seen[h.coord()] = true
			}
			if len(seen) != n {
				t.Errorf("got %d distinct records at the endpoint, want %d", len(seen), n)
			}
		})
	}
}

// selfSigned makes a certificate for 127.0.0.1, its own CA.
func selfSigned(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, pair
}

// TestConsumeHTTPS forwards to an https endpoint whose certificate is
// signed by a private CA given with --http-ca: every record arrives. The
// endpoint answers 400 to v5, and with no dead-letter destination the
// record is skipped and counted, and the commit passes it.
func TestConsumeHTTPS(t *testing.T) {
	t.Parallel()
	const n = 20
	b := newTopic(t, "tls", 1)
	produceKeyed(t, b, "tls", n, 4)
	ep := startEndpoint(t, 0, func(hs []hit) (int, http.Header, string) {
		if hs[0].value == "v5" {
			return http.StatusBadRequest, nil, "no"
		}
		return http.StatusOK, nil, ""
	}, true)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ep.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ep.url(), "https://") {
		t.Fatalf("endpoint %s is not https", ep.url())
	}
	p := startConsume(t, "--brokers", b.Addrs()[0], "--topic", "tls", "--group", "tls", "--http", ep.url(), "--http-ca", ca,
		"--progress", "off", "--log-level", "error")
	p.waitCommitted(b, "tls", "tls")
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.output())
	}
	if got := ep.okCount(); got != n-1 {
		t.Errorf("got %d records answered 200 over https, want %d", got, n-1)
	}
	wantFigures(t, finalFigures(t, p.stdout.String()), map[string]float64{"skipped": 1, "dead-lettered": 0, "rejected calls": 1, "committed": n})
	if !strings.Contains(p.stdout.String(), "no dead-letter destination") {
		t.Errorf("no warning about the missing dead-letter destination:\n%s", p.stdout.String())
	}
}

// testCA is a self-signed certificate for 127.0.0.1 (its own CA), with
// its PEM in file.
type testCA struct {
	cert tls.Certificate
	pool *x509.CertPool
	file string
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	certPEM, cert := selfSigned(t)
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return testCA{cert: cert, pool: pool, file: file}
}

// secureAuth is a way a kfake cluster demands to be reached: a SASL
// mechanism (user alice, password s3cret), over TLS or not.
type secureAuth struct {
	name      string
	mechanism string // as --sasl-mechanism names it
	tls       bool
	mech      sasl.Mechanism
}

var secureAuths = []secureAuth{
	{"PLAIN over TLS", "PLAIN", true, plain.Auth{User: "alice", Pass: "s3cret"}.AsMechanism()},
	{"SCRAM-SHA-256", "SCRAM-SHA-256", false, scram.Auth{User: "alice", Pass: "s3cret"}.AsSha256Mechanism()},
	{"SCRAM-SHA-512", "SCRAM-SHA-512", false, scram.Auth{User: "alice", Pass: "s3cret"}.AsSha512Mechanism()},
}

// start starts a kfake cluster that demands a, seeded with topics of
// partitions each (closed with the test), and returns it with the
// options of a franz-go client that reaches it.
func (a secureAuth) start(t *testing.T, ca testCA, partitions int32, topics ...string) (*kfake.Cluster, []kgo.Opt) {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(a.mechanism, "alice", "s3cret"),
		kfake.SeedTopics(partitions, topics...)}
	kopts := []kgo.Opt{kgo.SASL(a.mech)}
	if a.tls {
		opts = append(opts, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.cert}, MinVersion: tls.VersionTLS12}))
		kopts = append(kopts, kgo.DialTLSConfig(&tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, kopts
}
