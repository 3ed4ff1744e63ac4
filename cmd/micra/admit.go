package main

// `micra admit`: the operator's side of a network with admission — the
// network key, membership certificates and the revocation list
// (overlay/admission.go; docs/SECURITY.md).

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/overlay"
)

type admitOptions struct {
	key, out, list string
	peer           string
	peers          []string
	sink           bool
	valid          time.Duration
}

func init() {
	o := &admitOptions{}
	cmd := &cobra.Command{
		Use:   "admit --peer ID [--key network.key] [--sink] [--valid 8760h] [--out FILE]",
		Short: "admit a peer to a network with admission: sign its membership certificate with the network key",
		Long: `A network with admission takes as members only the peers whose membership
certificate its network key signed: their heartbeats, delegation records,
hand-offs, probes and carriers. The network key's holder (the operator of the
network's index sink) runs:

  micra admit init                      create network.key; print the network's id
  micra admit --peer ID [--sink]        sign the certificate of peer ID (the id
                                        micra init printed); --sink: it may
                                        announce the index sink role
  micra admit revoke --peer ID ...      add peers to the revocation list
  micra admit show FILE                 print a certificate or revocation list

Each node sets network = "<the network's id>" and saves its certificate as
data/membership.cert (or sets certificate = FILE). The sink takes --network,
--certificate and --revocations FILE (the list it spreads to the network).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAdmit(cmd.OutOrStdout(), o, time.Now()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.key, "key", "network.key", "the network key (micra admit init)")
	f.StringVar(&o.peer, "peer", "", "the peer id to admit")
	f.BoolVar(&o.sink, "sink", false, "it may announce the index sink role")
	f.DurationVar(&o.valid, "valid", 365*24*time.Hour, "how long the certificate is valid")
	f.StringVarP(&o.out, "out", "o", "", "where to write the certificate (default membership-<peer id>.cert)")

	initCmd := &cobra.Command{
		Use:   "init [--key network.key]",
		Short: "create the network key (0600; never overwritten) and print the network's id",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runAdmitInit(cmd.OutOrStdout(), o.key) },
	}
	initCmd.Flags().StringVar(&o.key, "key", "network.key", "where to create the network key")

	revoke := &cobra.Command{
		Use:   "revoke --peer ID [--peer ID ...] [--key network.key] [--list revocations]",
		Short: "add peers to the network's revocation list (its sequence number goes up by one)",
		Long: `Adds the peers to the revocation list in --list (created if missing), signed
anew with the network key. Give the file to the sink (micra sink --revocations
FILE, read again every 10 s) or copy it into any member's data directory as
"revocations": peers fetch a newer list from any member whose heartbeats
announce it, declare the revoked peers dead and refuse them from then on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAdmitRevoke(cmd.OutOrStdout(), o, time.Now()) },
	}
	revoke.Flags().StringVar(&o.key, "key", "network.key", "the network key")
	revoke.Flags().StringArrayVar(&o.peers, "peer", nil, "a peer id to revoke (repeat the flag for more)")
	revoke.Flags().StringVar(&o.list, "list", "revocations", "the revocation list file")

	show := &cobra.Command{
		Use:   "show FILE",
		Short: "print a membership certificate or a revocation list (its signature checked)",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return runAdmitShow(cmd.OutOrStdout(), args[0]) },
	}
	cmd.AddCommand(initCmd, revoke, show)
	rootCmd.AddCommand(cmd)
}

func runAdmitInit(w io.Writer, path string) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s exists: a network key is never overwritten (its certificates would all be void)", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	sk, err := overlay.LoadOrCreateKey(path)
	if err != nil {
		return err
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "network key written to %s (keep it secret: it admits members)\n", path)
	fmt.Fprintf(w, "network id %s\n\n", id)
	fmt.Fprintf(w, "each node's config.toml:  network = %q\n", id.String())
	fmt.Fprintf(w, "admit a node:             micra admit --key %s --peer <its peer id>\n", path)
	fmt.Fprintf(w, "admit the sink:           micra admit --key %s --peer <the sink's peer id> --sink\n", path)
	return nil
}

// networkKey reads an existing network key.
func networkKey(path string) (crypto.PrivKey, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("--key %s: no network key there (micra admit init creates one)", path)
		}
		return nil, err
	}
	return overlay.LoadOrCreateKey(path)
}

func runAdmit(w io.Writer, o *admitOptions, now time.Time) error {
	if o.peer == "" {
		return errors.New("--peer: the peer id to admit is required (micra init prints a node's; `micra admit init` creates the network key)")
	}
	id, err := peer.Decode(o.peer)
	if err != nil {
		return fmt.Errorf("--peer %q: not a peer id: %w", o.peer, err)
	}
	if o.valid <= 0 {
		return fmt.Errorf("--valid %v: must be positive", o.valid)
	}
	sk, err := networkKey(o.key)
	if err != nil {
		return err
	}
	cert := overlay.Certificate{Peer: id, Sink: o.sink, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(o.valid), Serial: uint64(now.UnixNano())}
	raw, err := overlay.IssueCertificate(sk, cert)
	if err != nil {
		return err
	}
	out := o.out
	if out == "" {
		out = "membership-" + id.String() + ".cert"
	}
	if err := overlay.WriteFileAtomic(out, raw, 0o644); err != nil {
		return err
	}
	netID, _ := peer.IDFromPrivateKey(sk)
	role := "member"
	if o.sink {
		role = "member and index sink"
	}
	fmt.Fprintf(w, "admitted %s as %s of network %s until %s\n", id, role, netID, cert.NotAfter.Format(time.RFC3339))
	fmt.Fprintf(w, "certificate written to %s: the node saves it as data/membership.cert\n", out)
	return nil
}

func runAdmitRevoke(w io.Writer, o *admitOptions, now time.Time) error {
	if len(o.peers) == 0 {
		return errors.New("--peer: at least one peer id to revoke is required")
	}
	var ids []peer.ID
	for _, s := range o.peers {
		id, err := peer.Decode(s)
		if err != nil {
			return fmt.Errorf("--peer %q: not a peer id: %w", s, err)
		}
		ids = append(ids, id)
	}
	sk, err := networkKey(o.key)
	if err != nil {
		return err
	}
	cur, err := os.ReadFile(o.list)
	if errors.Is(err, fs.ErrNotExist) {
		cur, err = nil, nil
	}
	if err != nil {
		return err
	}
	raw, list, err := overlay.AddRevocations(sk, cur, ids, now)
	if err != nil {
		return fmt.Errorf("--list %s: %w", o.list, err)
	}
	if err := overlay.WriteFileAtomic(o.list, raw, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "revocation list %d of network %s: %d peers revoked, written to %s\n", list.Seq, list.Network, len(list.Peers), o.list)
	return nil
}

func runAdmitShow(w io.Writer, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if c, err := overlay.OpenCertificate(raw); err == nil {
		role := "member"
		if c.Sink {
			role = "member and index sink"
		}
		fmt.Fprintf(w, "membership certificate (signature valid)\nnetwork\t%s\npeer\t%s\nrole\t%s\nvalid\t%s to %s\nserial\t%d\n",
			c.Network, c.Peer, role, c.NotBefore.Format(time.RFC3339), c.NotAfter.Format(time.RFC3339), c.Serial)
		return nil
	}
	r, err := overlay.OpenRevocations(raw)
	if err != nil {
		return fmt.Errorf("%s: neither a membership certificate nor a revocation list: %w", path, err)
	}
	fmt.Fprintf(w, "revocation list %d (signature valid)\nnetwork\t%s\nsigned\t%s\nrevoked\t%d peers\n", r.Seq, r.Network, r.At.Format(time.RFC3339), len(r.Peers))
	for _, id := range r.Peers {
		fmt.Fprintf(w, "\t%s\n", id)
	}
	return nil
}
