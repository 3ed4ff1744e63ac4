package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/overlay"
)

// Certificate and revocation files a node of a network with admission
// keeps in its data directory.
const (
	certificateFile = "membership.cert"
	revocationsFile = "revocations"
)

// certificatePath is where the node reads its membership certificate.
func (c *Config) certificatePath() string {
	if c.CertificateFile != "" {
		return c.CertificateFile
	}
	return filepath.Join(c.DataDir, certificateFile)
}

// identity is the peer id of the key in keyFile (created if missing).
func identity(keyFile string) (peer.ID, error) {
	sk, err := overlay.LoadOrCreateKey(keyFile)
	if err != nil {
		return "", fmt.Errorf("node: identity: %w", err)
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		return "", fmt.Errorf("node: identity: %w", err)
	}
	return id, nil
}

// admission opens the network's admission for the peer self (nil: an open
// network). A missing, foreign or expired certificate is an error that
// says what to do: the node would otherwise run as nobody's member.
func (c *Config) admission(self peer.ID, now time.Time) (*overlay.Admission, error) {
	if c.Network == "" {
		return nil, nil
	}
	network, err := peer.Decode(c.Network)
	if err != nil {
		return nil, fmt.Errorf("node: network %q is not a network key id (`micra admit init` prints it): %w", c.Network, err)
	}
	path := c.certificatePath()
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("node: network %s admits members only and %s is missing: send this node's peer id %s to the network's operator, who runs `micra admit --peer %s`, and save the certificate there", network, path, self, self)
	}
	if err != nil {
		return nil, fmt.Errorf("node: certificate: %w", err)
	}
	adm, err := overlay.NewAdmission(network, raw, filepath.Join(c.DataDir, revocationsFile))
	if err != nil {
		return nil, fmt.Errorf("node: %s: %w", path, err)
	}
	cert := adm.OwnCertificate()
	switch {
	case cert.Peer != self:
		return nil, fmt.Errorf("node: %s admits peer %s, but this node is %s (its key_file)", path, cert.Peer, self)
	case now.After(cert.NotAfter):
		return nil, fmt.Errorf("node: %s expired at %s: ask the network's operator for a new one (`micra admit --peer %s`)", path, cert.NotAfter.Format(time.RFC3339), self)
	case adm.Revoked(self):
		return nil, fmt.Errorf("node: the network's revocation list (%s) revokes this node (%s)", filepath.Join(c.DataDir, revocationsFile), self)
	}
	return adm, nil
}
