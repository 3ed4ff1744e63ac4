package node

import (
	"net/http"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/node/console"
)

// ConsoleNode is the console's node page as JSON (GET /console/node.json):
// the control API's own answers side by side, read at one moment.
type ConsoleNode struct {
	At     time.Time   `json:"at"`
	ID     IDInfo      `json:"id"`     // GET /v1/id
	Status StatusInfo  `json:"status"` // GET /v1/status
	Peers  []PeerInfo  `json:"peers"`  // GET /v1/peers
	Owned  []OwnerInfo `json:"owned"`  // GET /v1/owners?mine=1
	// Calibration is the recent calibration events, newest first (GET
	// /v1/calibration).
	Calibration []CalibrationInfo `json:"calibration"`
}

// ConsoleNetwork is the console's network page as JSON (GET
// /console/network.json): every member with its advertised position and
// every delegation record this node holds, each placed on the map.
type ConsoleNetwork struct {
	At     time.Time   `json:"at"`
	PeerID string      `json:"peer_id"` // the node answering
	Peers  []PeerInfo  `json:"peers"`   // GET /v1/peers
	Owners []OwnerInfo `json:"owners"`  // GET /v1/owners (every cached record)
	// Places gives each record's subnet (by index in Owners) a position:
	// the centroid of the subnet's registry country
	// (delegation.CountryCentroid), nil when its country has none. Hosts
	// are not geolocated: the map draws each subnet near its country's
	// centre.
	Places []*Position `json:"places"`
	// Hosts are the crawled hosts (the sink's records), most pages first;
	// Figures the paper's table so far; Curve probes per URL as the
	// hierarchy trains (console_crawl.go).
	Hosts   []HostInfo     `json:"hosts"`
	Figures NetworkFigures `json:"figures"`
	Curve   []CurvePoint   `json:"curve"`
}

// ConsoleView is the node page's JSON.
func (n *Node) ConsoleView(r *http.Request) ConsoleNode {
	return ConsoleNode{At: time.Now(), ID: n.IDInfo(), Status: n.Status(), Peers: n.Peers(),
		Owned: nonNil(n.Owners(r.Context(), nil, false, true)), Calibration: n.Calibration()}
}

// ConsoleNetworkView is the network page's JSON.
func (n *Node) ConsoleNetworkView(r *http.Request) ConsoleNetwork {
	v := ConsoleNetwork{At: time.Now(), PeerID: n.peer.ID().String(), Peers: n.Peers(),
		Owners: nonNil(n.Owners(r.Context(), nil, false, false))}
	v.Places = make([]*Position, len(v.Owners))
	for i, o := range v.Owners {
		if lat, lon, ok := delegation.CountryCentroid(o.Country); ok {
			v.Places[i] = &Position{Lat: lat, Lon: lon}
		}
	}
	v.Hosts, v.Figures, v.Curve = n.crawlView(r.Context(), v.Peers)
	return v
}

func nonNil(o []OwnerInfo) []OwnerInfo {
	if o == nil {
		return []OwnerInfo{}
	}
	return o
}

// consoleHandler serves the web console (mounted under console.Prefix).
func (n *Node) consoleHandler() http.Handler {
	return console.Handler(console.Views{
		Node:    func(r *http.Request) any { return n.ConsoleView(r) },
		Network: func(r *http.Request) any { return n.ConsoleNetworkView(r) },
	})
}
