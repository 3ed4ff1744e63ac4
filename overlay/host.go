package overlay

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
)

// LoadOrCreateKey reads the Ed25519 identity in path, creating it (0600) on
// first use. The file holds the libp2p protobuf-marshalled private key.
func LoadOrCreateKey(path string) (crypto.PrivKey, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		sk, err := crypto.UnmarshalPrivateKey(data)
		if err != nil {
			return nil, fmt.Errorf("overlay: key file %s: %w", path, err)
		}
		if sk.Type() != crypto.Ed25519 {
			return nil, fmt.Errorf("overlay: key file %s: key type %v, want Ed25519", path, sk.Type())
		}
		return sk, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("overlay: key file: %w", err)
	}
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, err
	}
	data, err = crypto.MarshalPrivateKey(sk)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("overlay: key file %s: %w", path, err)
	}
	// Write-then-rename so a crash never leaves a truncated identity.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return nil, fmt.Errorf("overlay: key file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("overlay: key file %s: %w", path, err)
	}
	return sk, nil
}

// LoadPSK reads a pre-shared key in the go-ipfs swarm.key format.
func LoadPSK(path string) (pnet.PSK, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("overlay: psk file: %w", err)
	}
	psk, err := pnet.DecodeV1PSK(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("overlay: psk file %s: %w", path, err)
	}
	return psk, nil
}

// NewHost builds the libp2p host described by cfg: Noise + yamux over TCP
// and QUIC (TCP only with a PSK, which QUIC refuses), identify and ping, a
// resource manager and a connection manager whose high water stays below the
// resource manager's connection limit.
func NewHost(cfg Config) (host.Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var sk crypto.PrivKey
	var err error
	if cfg.KeyFile != "" {
		sk, err = LoadOrCreateKey(cfg.KeyFile)
	} else {
		sk, _, err = crypto.GenerateEd25519Key(rand.Reader)
	}
	if err != nil {
		return nil, err
	}
	var psk pnet.PSK
	if cfg.PSKFile != "" {
		if psk, err = LoadPSK(cfg.PSKFile); err != nil {
			return nil, err
		}
	}
	listen := make([]ma.Multiaddr, 0, len(cfg.ListenAddrs))
	for _, s := range cfg.ListenAddrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("overlay: listen address %q: %w", s, err)
		}
		if psk != nil && isQUIC(a) {
			return nil, fmt.Errorf("overlay: listen address %q: QUIC cannot run in a private (PSK) network; use TCP", s)
		}
		listen = append(listen, a)
	}

	cm, err := connmgr.NewConnManager(cfg.ConnLowWater, cfg.ConnHighWater, connmgr.WithGracePeriod(cfg.ConnGrace))
	if err != nil {
		return nil, fmt.Errorf("overlay: connection manager: %w", err)
	}
	var rm network.ResourceManager
	if cfg.NullResourceManager {
		rm = &network.NullResourceManager{}
	} else {
		limits := rcmgr.PartialLimitConfig{
			System: rcmgr.ResourceLimits{
				Conns:   rcmgr.LimitVal(cfg.MaxConns),
				Streams: rcmgr.LimitVal(cfg.MaxStreams),
				Memory:  rcmgr.LimitVal64(cfg.MaxMemoryMiB << 20),
			},
		}.Build(rcmgr.DefaultLimits.Scale(cfg.MaxMemoryMiB<<20, 4*cfg.MaxConns))
		rm, err = rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits), rcmgr.WithMetricsDisabled())
		if err != nil {
			return nil, fmt.Errorf("overlay: resource manager: %w", err)
		}
	}

	opts := []libp2p.Option{
		libp2p.Identity(sk),
		libp2p.ListenAddrs(listen...),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.Ping(true),
		libp2p.UserAgent("micra/overlay"),
	}
	hasQUIC := false
	for _, a := range listen {
		hasQUIC = hasQUIC || isQUIC(a)
	}
	if psk != nil {
		opts = append(opts, libp2p.PrivateNetwork(psk))
	} else if hasQUIC || len(listen) == 0 {
		// QUIC only when configured: its UDP reuse machinery costs
		// goroutines that a TCP-only testnet peer does not need.
		opts = append(opts, libp2p.Transport(quic.NewTransport))
	}
	if cfg.Registerer != nil {
		opts = append(opts, libp2p.PrometheusRegisterer(cfg.Registerer))
	} else {
		opts = append(opts, libp2p.DisableMetrics())
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		cm.Close()
		return nil, fmt.Errorf("overlay: host: %w", err)
	}
	return h, nil
}

func isQUIC(a ma.Multiaddr) bool {
	for _, c := range a {
		if c.Protocol().Code == ma.P_QUIC_V1 || c.Protocol().Code == ma.P_QUIC {
			return true
		}
	}
	return false
}

// ParseBootstrap parses full multiaddrs (with /p2p/<id>) into AddrInfos.
func ParseBootstrap(addrs []string) ([]peer.AddrInfo, error) {
	var out []peer.AddrInfo
	for _, s := range addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("overlay: bootstrap address %q: %w", s, err)
		}
		ai, err := peer.AddrInfoFromP2pAddr(a)
		if err != nil {
			return nil, fmt.Errorf("overlay: bootstrap address %q: %w", s, err)
		}
		out = append(out, *ai)
	}
	return out, nil
}
