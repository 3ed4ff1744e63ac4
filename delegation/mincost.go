package delegation

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
)

// Assignment is the result of MinCostAssign.
type Assignment struct {
	// Owner[i] is the crawler index taking subnet i, or -1 when the optimum
	// splits subnet i between crawlers (see Split).
	Owner []int
	// Split[i] lists (crawler, pages) for split subnets only.
	Split map[int][][2]int
	// Cost is Σ pages·cost of the assignment.
	Cost float64
	// Exact is true when no subnet is split: Cost is then the exact optimum of
	// the (unsplittable) assignment problem. Otherwise Cost is a lower bound.
	Exact bool
}

// ErrNoCapacity is returned when the crawlers cannot hold all pages.
var ErrNoCapacity = errors.New("delegation: total capacity below total pages")

// MinCostAssign is the exact reference for load balancing: it assigns
// subnet i (pages[i] pages per day) to crawlers j (capacity caps[j], ≤ 0 =
// unlimited) minimising Σ pages·cost[i][j], where cost is the download time
// of one page of subnet i from crawler j. It solves the transportation
// problem by successive shortest paths with potentials (min-cost flow). With
// one page per subnet (the simulator's hosts) the flow is integral and the
// result exact; with larger subnets the optimum may split one, and the cost
// is then a lower bound for the unsplittable problem. Meant for small
// instances (thousands of subnets, tens of crawlers).
func MinCostAssign(pages []int, caps []int, cost [][]float64) (Assignment, error) {
	n, m := len(pages), len(caps)
	if len(cost) != n {
		return Assignment{}, fmt.Errorf("delegation: cost has %d rows for %d subnets", len(cost), n)
	}
	total := 0
	for i, p := range pages {
		if p < 0 {
			return Assignment{}, fmt.Errorf("delegation: subnet %d has negative pages", i)
		}
		if len(cost[i]) != m {
			return Assignment{}, fmt.Errorf("delegation: cost row %d has %d entries for %d crawlers", i, len(cost[i]), m)
		}
		if p > math.MaxInt-total {
			return Assignment{}, fmt.Errorf("delegation: total pages overflow an int")
		}
		total += p
	}
	capTotal, unlimited := 0, false
	for _, c := range caps {
		if c <= 0 {
			unlimited = true
			continue
		}
		capTotal = min(capTotal, math.MaxInt-c) + c // saturates: "no limit" may be written MaxInt
	}
	if !unlimited && capTotal < total {
		return Assignment{}, ErrNoCapacity
	}
	// nodes: 0 source, 1..n subnets, n+1..n+m crawlers, n+m+1 sink
	g := newFlowGraph(n + m + 2)
	src, sink := 0, n+m+1
	subEdge := make([][]int, n) // edge ids subnet→crawler
	for i, p := range pages {
		g.addEdge(src, 1+i, p, 0)
		subEdge[i] = make([]int, m)
		for j := range m {
			c := cost[i][j]
			if math.IsNaN(c) || math.IsInf(c, 0) || c < 0 {
				return Assignment{}, fmt.Errorf("delegation: cost[%d][%d] = %v is not a finite non-negative number", i, j, c)
			}
			subEdge[i][j] = g.addEdge(1+i, 1+n+j, p, c)
		}
	}
	for j, c := range caps {
		if c <= 0 {
			c = total
		}
		g.addEdge(1+n+j, sink, c, 0)
	}
	flow, fcost := g.run(src, sink, total)
	if flow < total {
		return Assignment{}, ErrNoCapacity
	}
	a := Assignment{Owner: make([]int, n), Cost: fcost, Exact: true}
	for i := range n {
		a.Owner[i] = -1
		var parts [][2]int
		for j := range m {
			if f := g.edges[subEdge[i][j]].flow; f > 0 {
				parts = append(parts, [2]int{j, f})
			}
		}
		switch len(parts) {
		case 0:
			// zero-page subnet: cheapest crawler
			best := 0
			for j := range m {
				if cost[i][j] < cost[i][best] {
					best = j
				}
			}
			if m > 0 {
				a.Owner[i] = best
			}
		case 1:
			a.Owner[i] = parts[0][0]
		default:
			if a.Split == nil {
				a.Split = make(map[int][][2]int)
			}
			a.Split[i] = parts
			a.Exact = false
		}
	}
	return a, nil
}

// AssignmentCost evaluates Σ pages·cost of owner (a heuristic's result) on
// the same inputs as MinCostAssign.
func AssignmentCost(pages []int, owner []int, cost [][]float64) float64 {
	var s float64
	for i, j := range owner {
		if j >= 0 {
			s += float64(pages[i]) * cost[i][j]
		}
	}
	return s
}

type flowEdge struct {
	to, rev, cap, flow int
	cost               float64
}

type flowGraph struct {
	adj   [][]int
	edges []flowEdge
}

func newFlowGraph(n int) *flowGraph { return &flowGraph{adj: make([][]int, n)} }

func (g *flowGraph) addEdge(u, v, c int, cost float64) int {
	id := len(g.edges)
	g.edges = append(g.edges, flowEdge{to: v, rev: id + 1, cap: c, cost: cost})
	g.edges = append(g.edges, flowEdge{to: u, rev: id, cap: 0, cost: -cost})
	g.adj[u] = append(g.adj[u], id)
	g.adj[v] = append(g.adj[v], id+1)
	return id
}

type pqItem struct {
	v int
	d float64
}
type pq []pqItem

func (p pq) Len() int           { return len(p) }
func (p pq) Less(i, j int) bool { return p[i].d < p[j].d || (p[i].d == p[j].d && p[i].v < p[j].v) }
func (p pq) Swap(i, j int)      { p[i], p[j] = p[j], p[i] }
func (p *pq) Push(x any)        { *p = append(*p, x.(pqItem)) }
func (p *pq) Pop() any          { o := *p; x := o[len(o)-1]; *p = o[:len(o)-1]; return x }

// run pushes up to want units from s to t along successive shortest paths
// (Dijkstra on reduced costs; all initial costs are non-negative so zero
// potentials are valid).
func (g *flowGraph) run(s, t, want int) (int, float64) {
	n := len(g.adj)
	pot := make([]float64, n)
	dist := make([]float64, n)
	prevE := make([]int, n)
	flow, cost := 0, 0.0
	const eps = 1e-9
	for flow < want {
		for i := range dist {
			dist[i] = math.Inf(1)
			prevE[i] = -1
		}
		dist[s] = 0
		h := &pq{{s, 0}}
		for h.Len() > 0 {
			it := heap.Pop(h).(pqItem)
			if it.d > dist[it.v]+eps {
				continue
			}
			for _, id := range g.adj[it.v] {
				e := &g.edges[id]
				if e.cap-e.flow <= 0 {
					continue
				}
				nd := dist[it.v] + e.cost + pot[it.v] - pot[e.to]
				if nd < dist[e.to]-eps {
					dist[e.to] = nd
					prevE[e.to] = id
					heap.Push(h, pqItem{e.to, nd})
				}
			}
		}
		if math.IsInf(dist[t], 1) {
			break
		}
		for i := range pot {
			if !math.IsInf(dist[i], 1) {
				pot[i] += dist[i]
			}
		}
		push := want - flow
		for v := t; v != s; {
			e := &g.edges[prevE[v]]
			push = min(push, e.cap-e.flow)
			v = g.edges[e.rev].to
		}
		for v := t; v != s; {
			id := prevE[v]
			g.edges[id].flow += push
			g.edges[g.edges[id].rev].flow -= push
			cost += float64(push) * g.edges[id].cost
			v = g.edges[g.edges[id].rev].to
		}
		flow += push
	}
	return flow, cost
}
