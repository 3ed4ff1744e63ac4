package hierarchy

import (
	"net/netip"
	"slices"
)

// DeriveAggregates adds the nesting that flat range data lacks. Rule: in
// address order, a maximal run of two or more ranges of the same (non-empty)
// organisation, each starting right after the previous one ends, forms an
// aggregate range over the run — the organisation's allocation above its
// pieces — with StatusAggregate, the common country if all pieces agree, and
// no ASN. IPv4 runs are cut at /8 boundaries so that aggregates nest under
// the IANA /8 blocks instead of straddling them. The input is not modified;
// the result holds only the new aggregates.
func DeriveAggregates(rs []Range) []Range {
	idx := make([]int, len(rs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if c := rs[a].Start.Compare(rs[b].Start); c != 0 {
			return c
		}
		return rs[b].End.Compare(rs[a].End)
	})
	var out []Range
	for i := 0; i < len(idx); {
		first := &rs[idx[i]]
		j := i
		country := first.Country
		for j+1 < len(idx) {
			cur, next := &rs[idx[j]], &rs[idx[j+1]]
			if first.Org == "" || next.Org != first.Org || !adjacent(cur.End, next.Start) ||
				(first.Start.Is4() && first.Start.As4()[0] != next.End.As4()[0]) {
				break
			}
			if next.Country != country {
				country = ""
			}
			j++
		}
		if j > i {
			out = append(out, Range{Start: first.Start, End: rs[idx[j]].End, Org: first.Org,
				Status: StatusAggregate, Country: country})
		}
		i = j + 1
	}
	return out
}

// adjacent reports whether b is the address right after a.
func adjacent(a, b netip.Addr) bool {
	n := a.Next()
	return n.IsValid() && n == b
}
