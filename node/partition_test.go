package node

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-crawler/micra/testnet/synthweb"
)

// A testnet node cuts itself off from the peers POST
// /v1/testnet/partition names (both ways: the other node declares it dead
// too) and rejoins them once the list is empty; a bad id is refused with
// the reason, and nothing is changed by it.
func TestPartitionEndpoint(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 2, HostsPerIP: 1, PagesPerHost: 2, CanonicalLinks: true})
	c := openCluster(t, web, 2, false)
	c.runAll()
	cl := controlClient(t, c, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	other := c.nodes[1].Peer().ID()
	if _, err := cl.Partition(ctx, []string{"12D3Koo-not-an-id"}); !isAPIError(err, http.StatusBadRequest) {
		t.Fatalf("a bad peer id: %v, want 400", err)
	}
	got, err := cl.Partition(ctx, []string{other.String()})
	if err != nil || len(got.Deny) != 1 || got.Deny[0] != other.String() {
		t.Fatalf("partition: %+v, %v", got, err)
	}
	waitFor(t, 30*time.Second, "both nodes to declare the other dead", func() bool {
		return !c.nodes[0].Peer().Members().IsPeerLive(other) && !c.nodes[1].Peer().Members().IsPeerLive(c.nodes[0].Peer().ID())
	})
	if got, err := cl.Partition(ctx, nil); err != nil || len(got.Deny) != 0 {
		t.Fatalf("heal: %+v, %v", got, err)
	}
	waitFor(t, 30*time.Second, "the nodes to find each other again", func() bool {
		return c.nodes[0].Peer().Members().IsPeerLive(other) && c.nodes[1].Peer().Members().IsPeerLive(c.nodes[0].Peer().ID())
	})
}

// A node without the testnet setting has no partition endpoint.
func TestPartitionEndpointTestnetOnly(t *testing.T) {
	n := &Node{reg: prometheus.NewRegistry()}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/testnet/partition", nil)
	n.controlHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound {
		t.Fatalf("POST /v1/testnet/partition on a non-testnet node: %d, want 404", rec.Code)
	}
}

func isAPIError(err error, code int) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}
