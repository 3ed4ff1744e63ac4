package hierarchy

// Migrate maps every node of old to the node of new that best covers the same
// range: the smallest node of new containing the whole range (the identical
// range when new has it, else its closest enclosing node; Root when nothing
// smaller does). The result is indexed by old NodeID; old Root maps to new
// Root. Delegations of old subnets can thus be carried over after a rebuild.
func Migrate(old, new *Tree) []NodeID {
	out := make([]NodeID, old.Len())
	out[Root] = Root
	for id := 1; id < old.Len(); id++ {
		f := old.fam(NodeID(id))
		s, e := old.bounds(NodeID(id))
		n := new.Lookup(toAddr(f, s))
		for n != Root {
			ms, me := new.bounds(n)
			if new.fam(n) == f && !s.less(ms) && !me.less(e) {
				break
			}
			n = new.parent[n]
		}
		out[id] = n
	}
	return out
}
