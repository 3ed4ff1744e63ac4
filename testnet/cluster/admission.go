package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/overlay"
)

// NetworkKey is a testnet's network key (DIR/network.key): the testnet is
// a network with admission, as a public one would be run, and the key
// admits its nodes, its sink and the node join.toml describes.
type NetworkKey struct {
	sk   crypto.PrivKey
	id   peer.ID
	file string
}

// certificateValid is how long a testnet's certificates are valid.
const certificateValid = 30 * 24 * time.Hour

// NewNetworkKey opens dir/network.key, creating it on first use.
func NewNetworkKey(dir string) (*NetworkKey, error) {
	file := filepath.Join(dir, "network.key")
	sk, err := overlay.LoadOrCreateKey(file)
	if err != nil {
		return nil, fmt.Errorf("cluster: network key: %w", err)
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		return nil, err
	}
	return &NetworkKey{sk: sk, id: id, file: file}, nil
}

// ID is the network's id (the network setting).
func (k *NetworkKey) ID() peer.ID { return k.id }

// Admit writes the membership certificate of the peer whose data
// directory is data (its identity key, created now if missing) as
// data/membership.cert, where a node and the sink read it.
func (k *NetworkKey) Admit(data string, sink bool) error {
	sk, err := overlay.LoadOrCreateKey(filepath.Join(data, "identity.key"))
	if err != nil {
		return err
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		return err
	}
	now := time.Now()
	raw, err := overlay.IssueCertificate(k.sk, overlay.Certificate{Peer: id, Sink: sink,
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(certificateValid), Serial: uint64(now.UnixNano())})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(data, "membership.cert"), raw, 0o644)
}
