package hierarchy

import (
	"net/netip"
	"slices"
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

// TestLookupDefaultBoundaries checks Lookup and SmallestNonUnary on the
// default tree at every node's first and last address and just outside
// them, against a descent from Root through the children lists.
func TestLookupDefaultBoundaries(t *testing.T) {
	tr, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	descend := func(ip netip.Addr) NodeID {
		id := Root
		for {
			ch := tr.Children(id)
			i, _ := slices.BinarySearchFunc(ch, ip, func(c NodeID, ip netip.Addr) int {
				n := tr.Node(c)
				switch {
				case n.Start.Is4() != ip.Is4():
					if n.Start.Is4() {
						return -1
					}
					return 1
				case n.End.Less(ip):
					return -1
				case ip.Less(n.Start):
					return 1
				}
				return 0
			})
			if i == len(ch) || !tr.Contains(ch[i], ip) {
				return id
			}
			id = ch[i]
		}
	}
	checks := 0
	for id := NodeID(1); int(id) < tr.Len(); id++ {
		n := tr.Node(id)
		for _, ip := range []netip.Addr{n.Start, n.End, n.Start.Prev(), n.End.Next()} {
			if !ip.IsValid() {
				continue
			}
			want := descend(ip)
			if got := tr.Lookup(ip); got != want {
				t.Fatalf("Lookup(%v) = %d, want %d", ip, got, want)
			}
			wantSNU := want
			if want != Root && tr.Node(want).Unary() {
				wantSNU = tr.Parent(want)
			}
			if got := tr.SmallestNonUnary(ip); got != wantSNU {
				t.Fatalf("SmallestNonUnary(%v) = %d, want %d", ip, got, wantSNU)
			}
			checks++
		}
	}
	t.Logf("%d addresses checked", checks)
}
