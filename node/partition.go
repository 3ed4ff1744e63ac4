package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/libp2p/go-libp2p/core/peer"
)

// A loopback testnet's network partitions (`micra testnet chaos`, `micra
// testnet run --partition`): POST /v1/testnet/partition names the peers
// this node refuses to connect with (overlay.Partition, a connection
// gater), and an empty list heals. Only a node started with the testnet
// setting serves it: a volunteer's node has no switch that cuts it off.

// PartitionInfo is /v1/testnet/partition's body and answer.
type PartitionInfo struct {
	Deny []string `json:"deny"` // peer ids this node neither dials nor accepts
}

// maxPartitionBody bounds a POST /v1/testnet/partition body.
const maxPartitionBody = 1 << 20

func (n *Node) servePartition(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPartitionBody))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("partition: %w", err))
			return
		}
		var in PartitionInfo
		if err := json.Unmarshal(b, &in); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("partition: want {\"deny\": [peer ids]}: %w", err))
			return
		}
		ids := make([]peer.ID, 0, len(in.Deny))
		for _, s := range in.Deny {
			id, err := peer.Decode(s)
			if err != nil {
				writeError(w, http.StatusBadRequest, fmt.Errorf("partition: peer id %q: %w", s, err))
				return
			}
			if id == n.peer.ID() {
				writeError(w, http.StatusBadRequest, errors.New("partition: a node cannot deny itself"))
				return
			}
			ids = append(ids, id)
		}
		n.partition.Set(n.peer.Host(), ids)
		n.log.Warn("testnet partition set", "denied", len(ids))
	}
	out := PartitionInfo{Deny: []string{}}
	for _, id := range n.partition.Denied() {
		out.Deny = append(out.Deny, id.String())
	}
	writeJSON(w, http.StatusOK, out)
}
