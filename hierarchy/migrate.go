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
		r := &old.nodes[id]
		n := new.Lookup(toAddr(r.fam, r.s))
		for n != Root {
			m := &new.nodes[n]
			if m.fam == r.fam && !r.s.less(m.s) && !m.e.less(r.e) {
				break
			}
			n = m.parent
		}
		out[id] = n
	}
	return out
}
