package node

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// testNetwork is a network key that admits each node a test opens.
type testNetwork struct {
	sk crypto.PrivKey
	id peer.ID
}

func newTestNetwork(t *testing.T) testNetwork {
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(sk)
	return testNetwork{sk, id}
}

// admitNode writes the certificate of the node whose data dir is dataDir
// (its identity key made now), valid from..until.
func (n testNetwork) admitNode(t *testing.T, dataDir string, from, until time.Time) peer.ID {
	t.Helper()
	self, err := identity(filepath.Join(dataDir, "identity.key"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := overlay.IssueCertificate(n.sk, overlay.Certificate{Peer: self, NotBefore: from, NotAfter: until})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, certificateFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return self
}

// A node of a network with admission refuses to start without a valid
// certificate of its own, and says what to do.
func TestNodeNeedsItsCertificate(t *testing.T) {
	net := newTestNetwork(t)
	now := time.Now()
	cfg := Config{DataDir: t.TempDir(), Network: net.id.String()}
	self, err := identity(filepath.Join(cfg.DataDir, "identity.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.admission(self, now); err == nil || !strings.Contains(err.Error(), "micra admit --peer "+self.String()) {
		t.Fatalf("no certificate: %v, want the command that admits %s", err, self)
	}
	net.admitNode(t, cfg.DataDir, now.Add(-48*time.Hour), now.Add(-time.Hour))
	if _, err := cfg.admission(self, now); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired certificate: %v", err)
	}
	other := Config{DataDir: t.TempDir(), Network: net.id.String(), CertificateFile: filepath.Join(cfg.DataDir, certificateFile)}
	net.admitNode(t, cfg.DataDir, now.Add(-time.Hour), now.Add(time.Hour))
	otherID, _ := identity(filepath.Join(other.DataDir, "identity.key"))
	if _, err := other.admission(otherID, now); err == nil || !strings.Contains(err.Error(), "but this node is") {
		t.Fatalf("another node's certificate: %v", err)
	}
	adm, err := cfg.admission(self, now)
	if err != nil || adm.Network() != net.id {
		t.Fatalf("a valid certificate: %v", err)
	}
	bad := Config{DataDir: cfg.DataDir, Network: "not-a-key"}
	if _, err := bad.admission(self, now); err == nil || !strings.Contains(err.Error(), "micra admit init") {
		t.Fatalf("a bad network id: %v", err)
	}
}

// Three admitted nodes crawl as an open network's would: every page once,
// each by its host's owner, every record sealed with certificates.
func TestAdmittedNodesCrawl(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 12, HostsPerIP: 2, PagesPerHost: 10, CanonicalLinks: true})
	net := newTestNetwork(t)
	now := time.Now()
	c := startCluster(t, web, 3, func(_ int, cfg *Config) {
		cfg.Network = net.id.String()
		net.admitNode(t, cfg.DataDir, now.Add(-time.Minute), now.Add(time.Hour))
	})
	c.waitCoverage(t, 40*time.Second)
	if st := web.Stats(); st.DuplicateFetches != 0 {
		t.Errorf("overlap: %d pages fetched twice", st.DuplicateFetches)
	}
	for i, nd := range c.nodes {
		s := nd.Status()
		if s.Network == nil || s.Network.ID != net.id.String() || s.MembersLive != 3 {
			t.Errorf("node %d: status network %+v, %d members", i, s.Network, s.MembersLive)
		}
	}
	c.report(t, "3 admitted nodes")
}
