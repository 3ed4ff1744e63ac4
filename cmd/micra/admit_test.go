package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/overlay"
)

// The operator's round: create the network key, admit a peer, revoke it,
// and read both files back; the key is never overwritten.
func TestAdmitCommands(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "network.key")
	out, err := runMicra(t, "admit", "init", "--key", key)
	if err != nil || !strings.Contains(out, "network id ") {
		t.Fatalf("admit init: %v\n%s", err, out)
	}
	netID := strings.Fields(out[strings.Index(out, "network id "):])[2]
	if _, err := runMicra(t, "admit", "init", "--key", key); err == nil || !strings.Contains(err.Error(), "never overwritten") {
		t.Fatalf("a second admit init: %v", err)
	}
	sk, err := overlay.LoadOrCreateKey(filepath.Join(dir, "node.key"))
	if err != nil {
		t.Fatal(err)
	}
	node, _ := peer.IDFromPrivateKey(sk)
	cert := filepath.Join(dir, "node.cert")
	if out, err := runMicra(t, "admit", "--key", key, "--peer", node.String(), "--out", cert); err != nil || !strings.Contains(out, "admitted "+node.String()) {
		t.Fatalf("admit: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	adm, err := overlay.NewAdmission(mustDecode(t, netID), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Check(node, raw); err != nil {
		t.Fatalf("the certificate written: %v", err)
	}
	if out, err := runMicra(t, "admit", "show", cert); err != nil || !strings.Contains(out, "peer\t"+node.String()) || !strings.Contains(out, "network\t"+netID) {
		t.Fatalf("admit show: %v\n%s", err, out)
	}
	list := filepath.Join(dir, "revocations")
	for seq := 1; seq <= 2; seq++ {
		out, err := runMicra(t, "admit", "revoke", "--key", key, "--list", list, "--peer", node.String())
		if err != nil || !strings.Contains(out, "revocation list "+string(rune('0'+seq))) || !strings.Contains(out, "1 peers revoked") {
			t.Fatalf("revoke %d: %v\n%s", seq, err, out)
		}
	}
	if out, err := runMicra(t, "admit", "show", list); err != nil || !strings.Contains(out, node.String()) {
		t.Fatalf("admit show list: %v\n%s", err, out)
	}
	for args, want := range map[string]string{
		"admit --key " + key:                                                 "--peer",
		"admit --key " + key + " --peer nope":                                "not a peer id",
		"admit --key " + dir + "/none --peer " + netID:                       "micra admit init",
		"admit revoke --key " + key + " --list " + cert + " --peer " + netID: "--list",
	} {
		if _, err := runMicra(t, strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("micra %s: %v, want an error naming %s", args, err, want)
		}
	}
}

func mustDecode(t *testing.T, s string) peer.ID {
	t.Helper()
	id, err := peer.Decode(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
