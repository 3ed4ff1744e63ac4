package hierarchy

import (
	"net/netip"
	"testing"
)

func TestDefault(t *testing.T) {
	tr, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, tr)
	id := tr.Lookup(netip.MustParseAddr("8.8.8.8"))
	if id == Root {
		t.Fatal("8.8.8.8 not covered")
	}
	if tr2, _ := Default(); tr2 != tr {
		t.Fatal("Default not shared")
	}
	anc := tr.Ancestors(id)
	if anc[len(anc)-1] != Root {
		t.Fatalf("ancestors %v", anc)
	}
	t.Logf("default: %d nodes, height %d, per level %v, %d orgs", tr.Len(), tr.Height(), tr.PerLevel(), tr.NumOrgs())
}
