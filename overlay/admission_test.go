package overlay

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

// netKey is a test network key.
type netKey struct {
	sk crypto.PrivKey
	id peer.ID
}

func newNetwork(t testing.TB) netKey {
	k := newKeyed(t)
	id, _ := peer.Decode(string(k.id))
	return netKey{k.sk, id}
}

// admit issues a certificate for id, valid for a day from now.
func (n netKey) admit(t testing.TB, id peer.ID, sink bool) []byte {
	t.Helper()
	now := time.Now()
	raw, err := IssueCertificate(n.sk, Certificate{Peer: id, Sink: sink, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour), Serial: 1})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (n netKey) revoke(t testing.TB, seq uint64, ids ...peer.ID) []byte {
	t.Helper()
	raw, err := SignRevocations(n.sk, Revocations{Seq: seq, At: time.Now(), Peers: ids})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func pid(t testing.TB, k keyed) peer.ID {
	id, err := peer.Decode(string(k.id))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A certificate admits exactly its peer, in its network, while it is valid
// and not revoked; a revocation list is taken only if it is the network's
// and newer, and survives a restart in the revocation file.
func TestCertificateChecks(t *testing.T) {
	net, other := newNetwork(t), newNetwork(t)
	alice, bob := newKeyed(t), newKeyed(t)
	aid, bid := pid(t, alice), pid(t, bob)
	file := filepath.Join(t.TempDir(), "revocations")
	adm, err := NewAdmission(net.id, net.admit(t, aid, false), file)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	adm.now = func() time.Time { return now }

	good := net.admit(t, bid, false)
	if c, err := adm.Check(bid, good); err != nil || c.Peer != bid || c.Network != net.id {
		t.Fatalf("bob's certificate: %+v, %v", c, err)
	}
	expired, _ := IssueCertificate(net.sk, Certificate{Peer: bid, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)})
	future, _ := IssueCertificate(net.sk, Certificate{Peer: bid, NotBefore: now.Add(time.Hour), NotAfter: now.Add(48 * time.Hour)})
	tampered := append([]byte(nil), good...)
	tampered[len(tampered)-1] ^= 1
	for name, tc := range map[string]struct {
		id   peer.ID
		cert []byte
		want string
	}{
		"none":                     {bid, nil, "no certificate"},
		"someone else's":           {aid, good, "presented for"},
		"another network's":        {bid, other.admit(t, bid, false), "of network"},
		"expired":                  {bid, expired, "expired"},
		"not yet valid":            {bid, future, "starts at"},
		"tampered":                 {bid, tampered, "certificate"},
		"not a certificate at all": {bid, []byte("hello"), "certificate"},
	} {
		_, err := adm.Check(tc.id, tc.cert)
		if !errors.Is(err, ErrNotAdmitted) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want not admitted: %s", name, err, tc.want)
		}
	}

	if _, err := adm.ApplyRevocations(other.revoke(t, 9, bid)); err == nil {
		t.Fatal("another network's revocation list taken")
	}
	added, err := adm.ApplyRevocations(net.revoke(t, 2, bid))
	if err != nil || len(added) != 1 || added[0] != bid {
		t.Fatalf("revocation list 2: %v, %v", added, err)
	}
	if _, err := adm.Check(bid, good); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked bob: %v", err)
	}
	if added, err := adm.ApplyRevocations(net.revoke(t, 1)); err != nil || added != nil || !adm.Revoked(bid) {
		t.Fatalf("an older list (seq 1) changed the revocations: %v, %v", added, err)
	}
	// the list outlives the process
	adm2, err := NewAdmission(net.id, nil, file)
	if err != nil {
		t.Fatal(err)
	}
	if _, seq := adm2.Revocations(); seq != 2 || !adm2.Revoked(bid) {
		t.Fatalf("after a restart: list %d, bob revoked %v", seq, adm2.Revoked(bid))
	}
	if _, err := NewAdmission(net.id, other.admit(t, aid, false), ""); err == nil {
		t.Fatal("a peer took its own certificate of another network")
	}
}

// With admission, the DHT validator refuses a record unless its owner,
// decider and block owners each carry a valid certificate: a sybil can
// neither own, nor decide, nor be given a block, whatever it signs.
func TestAdmittedRecordValidator(t *testing.T) {
	net := newNetwork(t)
	alice, bob, sybil := newKeyed(t), newKeyed(t), newKeyed(t)
	adm, err := NewAdmission(net.id, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var snap hierarchy.SnapshotID
	snap[0] = 3
	now := time.Now()
	v := RecordValidator{Snapshot: snap, Nodes: 100, MaxAge: 48 * time.Hour, Now: func() time.Time { return now }, Admission: adm}
	certA, certB := net.admit(t, pid(t, alice), false), net.admit(t, pid(t, bob), false)
	rec := func(owner, decider keyed) delegation.Record {
		return delegation.Record{Subnet: 42, Snapshot: snap, Owner: owner.id, OwnerRTT: time.Millisecond,
			DecidedBy: decider.id, At: now, Epoch: delegation.NextEpoch(0, now)}
	}
	sealWith := func(r delegation.Record, owner, decider keyed, certs ...[]byte) []byte {
		t.Helper()
		m, err := toPB(r)
		if err != nil {
			t.Fatal(err)
		}
		env, err := sealOwner(m, owner.sk)
		if err != nil {
			t.Fatal(err)
		}
		val, err := sealDecision(env, decider.sk, certs...)
		if err != nil {
			t.Fatal(err)
		}
		return val
	}
	key := DelegKey(42)
	if err := v.Validate(key, sealWith(rec(alice, bob), alice, bob, certA, certB)); err != nil {
		t.Fatalf("admitted owner and decider: %v", err)
	}
	withBlock := rec(alice, alice)
	withBlock.Blocks = []delegation.BlockDelegation{{Host: netip.MustParseAddr("127.0.0.9"), Owner: sybil.id, OwnerRTT: time.Millisecond}}
	giveConsents(t, &withBlock, sybil)
	sybilCert := newNetwork(t).admit(t, pid(t, sybil), false) // of another network
	for name, val := range map[string][]byte{
		"no certificates":               sealWith(rec(alice, bob), alice, bob),
		"the decider's missing":         sealWith(rec(alice, bob), alice, bob, certA),
		"owned and decided by a sybil":  sealWith(rec(sybil, sybil), sybil, sybil, sybilCert),
		"decided by a sybil":            sealWith(rec(alice, sybil), alice, sybil, certA),
		"a block given to a sybil":      sealWith(withBlock, alice, alice, certA),
		"a certificate that is garbage": sealWith(rec(alice, bob), alice, bob, certA, certB, []byte("junk")),
	} {
		if err := v.Validate(key, val); !errors.Is(err, ErrNotAdmitted) {
			t.Errorf("%s: %v, want refused: not admitted", name, err)
		}
	}
	if _, err := adm.ApplyRevocations(net.revoke(t, 1, pid(t, bob))); err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(key, sealWith(rec(alice, bob), alice, bob, certA, certB)); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("a record decided by a revoked peer: %v", err)
	}
}

// A network with admission, on real peers: admitted peers are members of
// each other and delegate subnets among themselves; a peer without a
// certificate hears them but is no member anywhere, and its records are not
// stored; a revocation list written into one peer's file reaches every
// peer with the heartbeats (SWIM: its messages), and they declare the
// revoked peer dead and forget it.
func TestAdmittedNetwork(t *testing.T) { forEachProtocol(t, testAdmittedNetwork) }

func testAdmittedNetwork(t *testing.T, membership string) {
	net := newNetwork(t)
	dir := t.TempDir()
	const admitted = 3
	tn := newTestNetOnWait(t, testTree(t), admitted+1, admitted, func(i int, c *Config, _ *Services) {
		c.Membership = membership
		c.KeyFile = filepath.Join(dir, "key"+string(rune('0'+i)))
		sk, err := LoadOrCreateKey(c.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(sk)
		if i == admitted {
			return // the sybil: an open-network peer
		}
		adm, err := NewAdmission(net.id, net.admit(t, id, false), filepath.Join(dir, "revocations"+string(rune('0'+i))))
		if err != nil {
			t.Fatal(err)
		}
		c.Admission = adm
	})
	honest, sybil := tn.peers[:admitted], tn.peers[admitted]
	if membership == MembershipSWIM {
		// the sybil joins through its bootstrap peers, the admitted ones:
		// they refuse its record (it carries no certificate)
		waitFor(t, slowdown*20*time.Second, func() bool {
			n := 0.0
			for _, p := range honest {
				n += counterValue(t, p.metrics.swimRefused)
			}
			return n > 0
		})
	} else {
		// the sybil hears the admitted peers (it checks nothing): the
		// admitted peers' heartbeats did reach it, and its reached them
		waitFor(t, slowdown*20*time.Second, func() bool { return sybil.Members().Count() == admitted+1 })
	}
	for _, p := range honest {
		if _, known := p.Members().Member(sybil.ID()); known || p.isMember(sybil.ID()) {
			t.Fatalf("peer %s took the sybil as a member", shortID(p.ID()))
		}
		if n := p.Members().Count(); n != admitted {
			t.Fatalf("peer %s has %d members, want %d", shortID(p.ID()), n, admitted)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*30*time.Second)
	defer cancel()
	for _, p := range honest {
		p.NewPolicy(delegation.NewMicra, delegation.Config{})
		if _, err := p.Join(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tn.settle(t, honest, slowdown*20*time.Second)

	// the sybil claims a subnet an honest peer holds, with its own record
	victim := honest[0].Directory().Records()[0]
	claim := victim
	claim.Owner, claim.DecidedBy, claim.At = sybil.selfID, sybil.selfID, time.Now()
	claim.Epoch = delegation.NextEpoch(victim.Epoch, claim.At)
	claim.Probes, claim.Blocks = nil, nil
	val, err := sybil.republishValue(claim)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := honest[1].validator.check(DelegKey(claim.Subnet), val); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("the sybil's record: %v, want refused", err)
	}
	_ = sybil.DHT().PutValue(ctx, DelegKey(claim.Subnet), val)
	for _, p := range honest {
		got, _, err := p.Directory().LookupDHT(ctx, claim.Subnet)
		if err != nil || got.Owner != victim.Owner {
			t.Fatalf("peer %s: subnet %d owned by %s (%v), want %s", shortID(p.ID()), claim.Subnet, got.Owner, err, victim.Owner)
		}
	}

	// the operator revokes honest[2]: the list enters at honest[0]'s file
	gone := honest[2]
	if err := os.WriteFile(filepath.Join(dir, "revocations0"), net.revoke(t, 1, gone.ID()), 0o644); err != nil {
		t.Fatal(err)
	}
	// revoked, not timed out: forgotten at once (a silent member stays
	// known, dead, for memberForget)
	waitFor(t, slowdown*(revocationReload+20*time.Second), func() bool {
		_, known0 := honest[0].Members().Member(gone.ID())
		_, known1 := honest[1].Members().Member(gone.ID())
		return !known0 && !known1
	})
	if _, seq := honest[1].cfg.Admission.Revocations(); seq != 1 {
		t.Fatalf("honest[1] holds list %d, want 1 (fetched with the heartbeats)", seq)
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "revocations1")); err != nil || len(raw) == 0 {
		t.Fatalf("honest[1] did not keep the list it fetched: %v", err)
	}
}
