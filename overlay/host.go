package overlay

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
		// a key others can read is no identity of this peer's any more (SSH
		// refuses such keys too): say so rather than use it
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("overlay: key file %s: mode %v, want 0600 (chmod 600 it)", path, fi.Mode().Perm())
		}
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
	// Write-then-rename so a crash never leaves a truncated identity: a
	// temp file of its own (created 0600, never a leftover's or a symlink's
	// mode), synced, then renamed and the directory synced.
	if err := WriteFileAtomic(path, data, 0o600); err != nil {
		return nil, fmt.Errorf("overlay: key file %s: %w", path, err)
	}
	return sk, nil
}

// WriteFileAtomic writes data to path through a new temp file in its
// directory (mode perm), synced before the rename; the directory is synced
// after it. A reader or a crash sees the old file or the new, never a
// part. (The identity key here; a node's api file and micra init's
// config.toml too.)
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// LoadPSK reads a pre-shared key in the go-ipfs swarm.key format.
func LoadPSK(path string) (pnet.PSK, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("overlay: psk file: %w", err)
	}
	if err := checkPSKFile(data); err != nil {
		return nil, fmt.Errorf("overlay: psk file %s: %w", path, err)
	}
	psk, err := pnet.DecodeV1PSK(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("overlay: psk file %s: %w", path, err)
	}
	return psk, nil
}

// checkPSKFile refuses what pnet.DecodeV1PSK would accept leniently: it
// reads the first 32 bytes of the key and ignores the rest, so a 64-byte key
// or trailing data would pass, and two different files sharing their first
// half would open the same private network.
func checkPSKFile(data []byte) error {
	lines := strings.Split(strings.TrimRight(string(data), "\r\n"), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], "\r")
	}
	if len(lines) < 3 || lines[0] != "/key/swarm/psk/1.0.0/" {
		return errors.New("want the lines /key/swarm/psk/1.0.0/, an encoding and the key")
	}
	switch enc, key := lines[1], strings.Join(lines[2:], "\n"); enc {
	case "/base16/":
		if len(lines) != 3 || len(key) != 64 {
			return fmt.Errorf("a /base16/ key is 64 hex digits on one line, not %d characters", len(key))
		}
	case "/base64/":
		if len(lines) != 3 || len(key) != 44 {
			return fmt.Errorf("a /base64/ key is 44 characters on one line, not %d", len(key))
		}
	case "/bin/":
		if len(data) != len("/key/swarm/psk/1.0.0/\n/bin/\n")+32 {
			return errors.New("a /bin/ key is exactly 32 bytes after the encoding line")
		}
	default:
		return fmt.Errorf("encoding %q: want /base16/, /base64/ or /bin/", enc)
	}
	return nil
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
			// the inbound and outbound sub-limits too: left to their scaled
			// defaults (inbound 96) they refused connections long before
			// the connection manager's high water trims any
			System: rcmgr.ResourceLimits{
				Conns:           rcmgr.LimitVal(cfg.MaxConns),
				ConnsInbound:    rcmgr.LimitVal(cfg.MaxConns),
				ConnsOutbound:   rcmgr.LimitVal(cfg.MaxConns),
				Streams:         rcmgr.LimitVal(cfg.MaxStreams),
				StreamsInbound:  rcmgr.LimitVal(cfg.MaxStreams),
				StreamsOutbound: rcmgr.LimitVal(cfg.MaxStreams),
				Memory:          rcmgr.LimitVal64(cfg.MaxMemoryMiB << 20),
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
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.Ping(true),
		libp2p.UserAgent("micra/overlay"),
	}
	if cfg.Partition != nil {
		opts = append(opts, libp2p.ConnectionGater(cfg.Partition))
	}
	if cfg.Bandwidth != nil {
		opts = append(opts, libp2p.BandwidthReporter(cfg.Bandwidth))
	}
	if cfg.WireDelay != nil {
		opts = append(opts, libp2p.Transport(tcp.NewTCPTransport, tcp.WithDialerForAddr(wireDialer(cfg.WireDelay))))
	} else {
		opts = append(opts, libp2p.Transport(tcp.NewTCPTransport))
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
