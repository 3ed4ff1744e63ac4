package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/micra-crawler/micra/node"
)

// TestControlCommands runs micra id, status, peers, owners and seed against
// a real `micra node` process, found by its data directory (and by
// $MICRA_API), and checks what they say against the node's own output and
// a loopback web server that sees the seed fetched.
func TestControlCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "n")

	// no node yet: a clear error naming the file and the command to run
	_, err := runMicra(t, "status", "--data", data)
	if err == nil || !strings.Contains(err.Error(), "no node running at "+data) || !strings.Contains(err.Error(), "micra node --data-dir "+data) {
		t.Fatalf("status without a node: %v", err)
	}
	// a stale api file (a node killed): the URL does not answer
	stale := filepath.Join(dir, "stale")
	os.MkdirAll(stale, 0o700)
	os.WriteFile(filepath.Join(stale, node.APIFile), []byte("http://127.0.0.1:1\n"), 0o600)
	if _, err := runMicra(t, "id", "--data", stale); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("id with a stale api file: %v", err)
	}

	fetched := make(chan string, 16)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		select {
		case fetched <- r.URL.Path:
		default:
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><head><title>seeded</title></head><body><p>a page given as a seed to a running node</p></body></html>")
	}))
	defer web.Close()

	p := startNode(t, "--data", data, "--testnet", "--listen", "/ip4/127.0.0.1/tcp/0",
		"--crawler-addr", "1.1.1.1", "--api", "127.0.0.1:0", "--concurrency", "2")
	listening, _, _ := p.ready(t) // (the control API serves from before the ready line)
	apiFile := filepath.Join(data, node.APIFile)

	out, err := runMicra(t, "id", "--data", data, "--json")
	if err != nil {
		t.Fatalf("id: %v\n%s", err, out)
	}
	var id node.IDInfo
	if err := json.Unmarshal([]byte(out), &id); err != nil {
		t.Fatalf("id --json: %v\n%s", err, out)
	}
	if id.Role != "crawler" || id.CrawlerAddr != "1.1.1.1" || id.Policy != "micra" || len(id.Addrs) == 0 ||
		!strings.HasSuffix(id.Addrs[0], "/p2p/"+id.PeerID) {
		t.Errorf("id %+v", id)
	}
	out, err = runMicra(t, "id", "--data", data)
	if err != nil || !strings.Contains(out, id.PeerID) || !strings.Contains(out, "crawler (capacity") {
		t.Errorf("id: %v\n%s", err, out)
	}
	// the node prints its addresses before it runs
	if len(listening) == 0 || !strings.HasSuffix(listening[0], "/p2p/"+id.PeerID) {
		t.Errorf("micra node printed %q; micra id says peer %s", listening, id.PeerID)
	}

	// $MICRA_API names the node when no flag does
	apiURL, err := node.ReadAPIFile(data)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(apiEnv, apiURL)
	out, err = runMicra(t, "peers")
	if err != nil || !strings.Contains(out, id.PeerID) || !strings.Contains(out, "self") || !strings.Contains(out, "LAST HEARD") {
		t.Errorf("peers: %v\n%s", err, out)
	}

	seed := web.URL + "/seeded.html"
	out, err = runMicra(t, "seed", "--data", data, seed, "http://exa mple.com/")
	if err == nil || !strings.Contains(err.Error(), "1 of 2 seeds rejected") ||
		!strings.Contains(out, "queued") || !strings.Contains(out, "1 queued, 0 handed off, 0 known, 1 rejected") {
		t.Fatalf("seed: %v\n%s", err, out)
	}
	select {
	case path := <-fetched:
		if path != "/seeded.html" {
			t.Errorf("the node fetched %s, want the seed", path)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the seed was not fetched in 60 s\n%s", p.stderr)
	}
	seeds := filepath.Join(dir, "seeds.txt")
	os.WriteFile(seeds, []byte("# again\n"+seed+"\n"), 0o644)
	if out, err = runMicra(t, "seed", "--api", apiURL, "--file", seeds); err != nil || !strings.Contains(out, "1 known") {
		t.Errorf("seed --file (the same seed): %v\n%s", err, out)
	}

	// the web server saw the request before the crawler counted the page
	var st node.StatusInfo
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err = runMicra(t, "status", "--data", data, "--json")
		if err != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		st = node.StatusInfo{}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		if st.Crawl == nil || st.Crawl.PagesFetched >= 1 || time.Now().After(deadline) {
			break
		}
	}
	if st.PeerID != id.PeerID || st.MembersLive != 1 || st.SubnetsOwned != 1 || st.Crawl == nil || st.Crawl.PagesFetched < 1 {
		t.Errorf("status %+v crawl %+v", st, st.Crawl)
	}
	out, err = runMicra(t, "status", "--data", data)
	for _, want := range []string{"caught up", "frontier", "outbox", "hand-off", "sink", "none announced on the network yet"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("status: %v; no %q in\n%s", err, want, out)
		}
	}

	// the node's own address, from its cached record (placed on join);
	// the seed's, by a lookup (on loopback no probe answers: a hashed
	// decision, which publishes no record to cache)
	out, err = runMicra(t, "owners", "--data", data, "1.1.1.1")
	if err != nil || !strings.Contains(out, "1.1.1.1 → "+id.PeerID+" (this node)") || !strings.Contains(out, "decided by "+id.PeerID) {
		t.Errorf("owners 1.1.1.1: %v\n%s", err, out)
	}
	out, err = runMicra(t, "owners", "--data", data, "--lookup", "127.0.0.1")
	if err != nil || !strings.Contains(out, "127.0.0.1 → "+id.PeerID+" (this node)") || !strings.Contains(out, "(lookup)") {
		t.Errorf("owners --lookup 127.0.0.1: %v\n%s", err, out)
	}
	out, err = runMicra(t, "owners", "--data", data, "--mine")
	if err != nil || !strings.Contains(out, "(this node)") || !strings.Contains(out, "records") {
		t.Errorf("owners --mine: %v\n%s", err, out)
	}

	// pause: the status says so, and so does a second pause; resume
	if out, err = runMicra(t, "pause", "--data", data); err != nil || !strings.Contains(out, "crawl paused: no new fetches") {
		t.Errorf("pause: %v\n%s", err, out)
	}
	if out, err = runMicra(t, "pause", "--data", data); err != nil || !strings.Contains(out, "crawl already paused since") {
		t.Errorf("pause again: %v\n%s", err, out)
	}
	if out, err = runMicra(t, "status", "--data", data); err != nil || !strings.Contains(out, "no new fetches until `micra resume`") {
		t.Errorf("status while paused: %v\n%s", err, out)
	}
	if out, err = runMicra(t, "resume", "--data", data, "--json"); err != nil || !strings.Contains(out, `"paused": false`) || !strings.Contains(out, `"changed": true`) {
		t.Errorf("resume --json: %v\n%s", err, out)
	}
	if out, err = runMicra(t, "resume", "--data", data); err != nil || !strings.Contains(out, "crawl not paused") {
		t.Errorf("resume again: %v\n%s", err, out)
	}
	if _, err = runMicra(t, "pause", "--data", data); err != nil { // (stopped paused: restarts paused, below)
		t.Fatal(err)
	}

	p.signal(t, syscall.SIGINT)
	if _, err := os.Stat(apiFile); !os.IsNotExist(err) {
		t.Errorf("api file after the node stopped: %v", err)
	}
	if _, err := runMicra(t, "id", "--data", data); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("id after the node stopped: %v", err)
	}

	// stopped while paused, the node restarts paused
	p = startNode(t, "--data", data, "--testnet", "--listen", "/ip4/127.0.0.1/tcp/0",
		"--crawler-addr", "1.1.1.1", "--api", "127.0.0.1:0", "--concurrency", "2")
	p.ready(t)
	if out, err = runMicra(t, "status", "--data", data); err != nil || !strings.Contains(out, "no new fetches until `micra resume`") {
		t.Errorf("status after a restart while paused: %v\n%s", err, out)
	}
	if out, err = runMicra(t, "resume", "--data", data); err != nil || !strings.Contains(out, "crawl resumed") {
		t.Errorf("resume after the restart: %v\n%s", err, out)
	}
	p.signal(t, syscall.SIGINT)
}

// micra status --home DIR finds the node through the home's config.toml
// (its data_dir), and says where it looked when no node runs there.
func TestControlFindsNodeByHome(t *testing.T) {
	home := filepath.Join(t.TempDir(), "h")
	if err := runInit(io.Discard, &initOptions{home: home, testnet: true}); err != nil {
		t.Fatal(err)
	}
	_, _, err := (&ctlOptions{home: home}).client()
	want := filepath.Join(home, "data", node.APIFile)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("status --home %s with no node: %v, want it to name %s", home, err, want)
	}
	if _, _, err := (&ctlOptions{home: filepath.Join(home, "none")}).client(); err == nil || !strings.Contains(err.Error(), "micra init") {
		t.Fatalf("a home without config.toml: %v", err)
	}
}

// A seed spooled before its owner is decided (no quorum, a failed
// decision) says so, rather than "to " and nothing.
func TestPrintSeedsUndecidedOwner(t *testing.T) {
	var b strings.Builder
	printSeeds(&b, node.SeedsInfo{HandedOff: 2, Seeds: []node.SeedResult{
		{URL: "http://a.example/", Status: node.SeedHandedOff, Owner: "12D3KooWOwner"},
		{URL: "http://b.example/", Status: node.SeedHandedOff},
	}})
	out := b.String()
	var bLine string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "http://b.example/") {
			bLine = l
		}
	}
	if !strings.Contains(out, "to 12D3KooWOwner") || !strings.Contains(bLine, "owner not decided yet: waits in the hand-off spool") {
		t.Fatalf("seed lines:\n%s", out)
	}
}
