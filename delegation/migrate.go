package delegation

import (
	"context"
	"fmt"

	"github.com/micra-crawler/micra/hierarchy"
)

// MigrateRecords carries delegation records made on snapshot old over to
// snapshot new, using hierarchy.Migrate: each record moves to the smallest
// node of new covering its whole old range. Records whose range is covered by
// nothing smaller than Root are dropped (their hosts are delegated afresh,
// lazily). When several old records land on one new node, the one whose old
// range is identical to the new node wins, else the Select rule decides.
// A record's block delegations go with it when the new tree puts their
// hosts in the same subnet. Epochs are kept so later re-delegations still supersede them.
// Records not made on old are left out: their subnets are nodes of another
// tree.
func MigrateRecords(old, new *hierarchy.Tree, recs []Record) []Record {
	m := hierarchy.Migrate(old, new)
	snap, oldSnap := new.ID(), old.ID()
	type cand struct {
		rec   Record
		exact bool
	}
	best := make(map[hierarchy.NodeID]cand)
	var order []hierarchy.NodeID
	for _, r := range recs {
		if r.Snapshot != oldSnap || int(r.Subnet) >= len(m) || r.Subnet == hierarchy.None {
			continue
		}
		ns := m[r.Subnet]
		if ns == hierarchy.Root || ns == hierarchy.None {
			continue
		}
		on, nn := old.Node(r.Subnet), new.Node(ns)
		exact := on.Start == nn.Start && on.End == nn.End
		nr := r
		nr.Subnet, nr.Snapshot = ns, snap
		nr.Blocks = migrateBlocks(new, ns, r.Blocks)
		cur, seen := best[ns]
		switch {
		case !seen:
			order = append(order, ns)
			best[ns] = cand{nr, exact}
		case exact && !cur.exact, exact == cur.exact && Better(nr, cur.rec):
			best[ns] = cand{nr, exact}
		}
	}
	out := make([]Record, 0, len(order))
	for _, ns := range order {
		out = append(out, best[ns].rec)
	}
	return out
}

// migrateBlocks keeps the blocks whose host the new tree still puts in
// subnet ns (a block now in a smaller subnet is delegated afresh there).
func migrateBlocks(new *hierarchy.Tree, ns hierarchy.NodeID, blocks []BlockDelegation) []BlockDelegation {
	var out []BlockDelegation
	for _, b := range blocks {
		if new.SmallestNonUnary(b.Host) == ns {
			out = append(out, b)
		}
	}
	return out
}

// MigrateDirectory publishes the migrated form of recs (made on old) into
// dst (indexed on new) and returns how many records it carried over. A
// subnet dst already holds a record for keeps it: that is a decision made
// on the new tree, while a migrated record is the old tree's guess, and
// their epochs do not compare (the new tree's start again at 1).
func MigrateDirectory(ctx context.Context, old, new *hierarchy.Tree, recs []Record, dst Directory) (int, error) {
	n := 0
	for _, r := range MigrateRecords(old, new, recs) {
		if _, ok, err := dst.Lookup(ctx, r.Subnet); err != nil {
			return n, fmt.Errorf("delegation: migrate subnet %d: %w", r.Subnet, err)
		} else if ok {
			continue
		}
		if _, err := dst.Publish(ctx, r); err != nil {
			return n, fmt.Errorf("delegation: migrate subnet %d: %w", r.Subnet, err)
		}
		n++
	}
	return n, nil
}
