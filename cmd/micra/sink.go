package main

// `micra sink`: the index sink (node/sink) — ingest over libp2p, change log,
// streams for indexers; `micra sink import`; `micra subscribe`.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/crawl/pack"
	hierarchydata "github.com/micra-crawler/micra/data/hierarchy"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/node/sink/export"
	"github.com/micra-crawler/micra/node/sink/jetstream"
	"github.com/micra-crawler/micra/node/sink/pb"
	"github.com/micra-crawler/micra/node/sink/search"
	"github.com/micra-crawler/micra/overlay"
)

type sinkOptions struct {
	data, httpAddr, stream, psk string
	listen                      []string
	noSync                      bool
	searchShards                int
	memoryLimit                 string
	retain                      string
	// the network: peers to join through, its hierarchy snapshot, who may
	// deliver (members, any), and whether crawlers are told of this sink
	bootstrap       []string
	hierarchy       string
	admit           string
	announce        bool
	heartbeat, fail time.Duration
	membership      string
	// a network with admission: its id, this sink's certificate and the
	// revocation list it spreads
	network, certificate, revocations string
}

func init() {
	o := &sinkOptions{}
	cmd := &cobra.Command{
		Use:   "sink --data DIR [--listen MULTIADDR] [--http ADDR] [--bootstrap MULTIADDR]",
		Short: "run the index sink: crawlers deliver carriers over libp2p, indexers read the change log over HTTP",
		Long: `Runs micra's index sink until interrupted. Crawlers deliver their carriers over
the libp2p protocol /micra/carrier/1 (give each node --sink with the address printed
at start); every record is committed durably, once, into a change log with a
sequence number. Indexers read the log over HTTP (docs/sink.md):

  GET /v1/records?after=SEQ[&follow=true][&host=H|&suffix=DOMAIN][&keyword=K][&lang=L][&changed=true]
  GET /v1/events   (Server-Sent Events, resumable with Last-Event-ID)
  GET /v1/status   GET /v1/search?q=WORDS   GET /metrics

The sink is a light member of the network (the membership protocol only,
--membership as the nodes' setting: swim by default, or heartbeat): it follows
the members and takes carriers only from live members (--admit members; others
are answered NOT_MEMBER and keep their carriers), and it announces itself in
its own record (heartbeats), so nodes with no sink setting find it and deliver
here. --bootstrap joins the network through its peers; without it the sink
hears the members that connect to it. Nodes and sink must share the hierarchy
snapshot (--hierarchy, default the embedded one).

--stream nats://HOST:PORT also publishes every record to a NATS JetStream stream
(MICRA, subject micra.records, the record's sequence as the message id), for
indexers that consume from a JetStream cluster.

The data directory holds the identity key (identity.key) and the log (log/).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSink(cmd.Context(), o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.data, "data", "", "data directory (identity key, change log)")
	f.StringArrayVar(&o.listen, "listen", []string{"/ip4/127.0.0.1/tcp/4002"}, "libp2p listen multiaddr (repeatable)")
	f.StringVar(&o.httpAddr, "http", "127.0.0.1:8090", "HTTP address of the streams, status and /metrics")
	f.BoolVar(&o.noSync, "no-sync", false, "do not fsync each commit (an acknowledged carrier then survives a crash, not a power loss)")
	f.StringVar(&o.retain, "retain", "", "bound the change log by age (720h, 30d) and/or size of its entries (50GiB), comma-separated: older records are dropped from its start every minute, and a subscriber behind it is told so (410 Gone: \"cursor N is before the log's start M\")")
	f.StringVar(&o.memoryLimit, "memory-limit", "384MiB", "soft limit of the Go heap (runtime/debug.SetMemoryLimit; GOMEMLIMIT wins if set): the collector works harder near it rather than let the heap double; 0 for none")
	f.IntVar(&o.searchShards, "search-shards", 2, "split the full-text index into this many Bleve indexes, written in parallel and searched together (fixed when the index is made: delete DATA/search to change it)")
	f.StringVar(&o.psk, "psk", "", "the network's pre-shared key file (a private network: only its nodes can connect and deliver)")
	f.StringVar(&o.stream, "stream", "", "also publish every record to NATS JetStream at this URL (nats://HOST:PORT; stream MICRA, subject micra.records)")
	f.StringArrayVar(&o.bootstrap, "bootstrap", nil, "a peer of the network to join through, as a multiaddr ending in /p2p/<peer id> (repeatable)")
	f.StringVar(&o.hierarchy, "hierarchy", "", "the IP hierarchy snapshot file the network's peers share (default: the embedded one)")
	f.StringVar(&o.admit, "admit", "members", "who may deliver: members (live members of the network) or any (any peer that can connect: with --psk, or on loopback)")
	f.BoolVar(&o.announce, "announce", true, "announce this sink to the network, so nodes with no sink setting deliver here")
	f.StringVar(&o.network, "network", "", "the network key's id (micra admit init): a network with admission, whose members only may deliver")
	f.StringVar(&o.certificate, "certificate", "", "this sink's certificate, with the sink role (micra admit --sink; default DATA/membership.cert)")
	f.StringVar(&o.revocations, "revocations", "", "the network's revocation list (micra admit revoke; read again every 10 s and spread to the members; default DATA/revocations)")
	f.DurationVar(&o.heartbeat, "heartbeat", 0, "membership heartbeat interval (default 1s, as a node's)")
	f.StringVar(&o.membership, "membership", "swim", "the network's membership protocol: swim or heartbeat (as its nodes' membership setting)")
	f.DurationVar(&o.fail, "failure-timeout", 0, "a member silent this long is no longer admitted (default 5s, as a node's)")

	imp := &cobra.Command{
		Use:   "import --data DIR PATH…",
		Short: "commit .mcar carrier files (or directories of them) into the sink's log; idempotent",
		Long: `Commits carrier files into the sink's change log, as if their crawlers had
delivered them: a carrier committed before (by import or delivery) adds nothing, so
importing a folder twice, or a folder whose carriers were also delivered, is safe.
A damaged file is reported as "file: reason" and the others are still imported; the
exit status is then non-zero. Run it while the sink is stopped (the log is opened
exclusively).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return sinkImport(cmd.OutOrStdout(), cmd.ErrOrStderr(), o.data, args, o.noSync)
		},
	}
	imp.Flags().StringVar(&o.data, "data", "", "the sink's data directory")
	imp.Flags().BoolVar(&o.noSync, "no-sync", false, "do not fsync each commit")
	cmd.AddCommand(imp)
	rootCmd.AddCommand(cmd)
}

// setMemoryLimit sets the Go heap's soft limit from --memory-limit
// ("384MiB", "1GiB", "0" for none), unless GOMEMLIMIT set one. The heap's
// live part at 1,000,000 records is ~250 MB (the page table, Badger's
// memtables and caches, the index's batches); with the collector's
// default the heap grew to twice that.
func setMemoryLimit(s string) error {
	if os.Getenv("GOMEMLIMIT") != "" {
		return nil
	}
	n, err := parseBytes(s)
	if err != nil {
		return fmt.Errorf("sink: --memory-limit %q: %w", s, err)
	}
	if n > 0 {
		debug.SetMemoryLimit(n)
	}
	return nil
}

// parseBytes reads a size: a number of bytes with an optional KiB, MiB,
// GiB (or KB, MB, GB: also powers of 1024) suffix.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("want a size such as 384MiB, 1GiB or 0")
	}
	return n * mult, nil
}

func openSinkStore(data string, noSync bool, reg prometheus.Registerer) (*sink.Store, error) {
	return openSinkStoreRetaining(data, noSync, reg, sink.Retention{})
}

func openSinkStoreRetaining(data string, noSync bool, reg prometheus.Registerer, retain sink.Retention) (*sink.Store, error) {
	if data == "" {
		return nil, errors.New("sink: --data DIR is required")
	}
	return sink.Open(sink.Options{Dir: filepath.Join(data, "log"), NoSync: noSync, Logger: slog.Default(), Registerer: reg, Retain: retain})
}

// parseRetention reads --retain: an age (a Go duration, or days: "30d"),
// a size ("50GiB"), or both, comma-separated.
func parseRetention(s string) (sink.Retention, error) {
	var r sink.Retention
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "":
		case strings.HasSuffix(part, "B"):
			n, err := parseBytes(part)
			if err != nil || n == 0 {
				return r, fmt.Errorf("--retain %q: want a size such as 50GiB", part)
			}
			r.Bytes = n
		case strings.HasSuffix(part, "d"):
			days, err := strconv.ParseFloat(strings.TrimSuffix(part, "d"), 64)
			if err != nil || days <= 0 {
				return r, fmt.Errorf("--retain %q: want an age such as 30d or 720h", part)
			}
			r.Age = time.Duration(days * 24 * float64(time.Hour))
		default:
			d, err := time.ParseDuration(part)
			if err != nil || d <= 0 {
				return r, fmt.Errorf("--retain %q: want an age such as 30d or 720h, or a size such as 50GiB", part)
			}
			r.Age = d
		}
	}
	return r, nil
}

// trimLoop applies the log's retention now and every minute until ctx
// ends.
func trimLoop(ctx context.Context, store *sink.Store) {
	for {
		if n, err := store.Trim(time.Now()); err != nil {
			slog.Warn("sink: retention", "err", err)
		} else if n > 0 {
			slog.Info("sink: retention dropped records from the log's start", "records", n, "start", store.Start())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Minute):
		}
	}
}

func runSink(ctx context.Context, o *sinkOptions) error {
	if err := setMemoryLimit(o.memoryLimit); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	// the HTTP address first: a taken port is an error before anything opens
	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("sink: --http: %w", err)
	}
	defer ln.Close()
	retain, err := parseRetention(o.retain)
	if err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	store, err := openSinkStoreRetaining(o.data, o.noSync, reg, retain)
	if err != nil {
		return err
	}
	defer store.Close()
	if retain != (sink.Retention{}) {
		tctx, stopTrim := context.WithCancel(ctx)
		trimDone := make(chan struct{})
		go func() { defer close(trimDone); trimLoop(tctx, store) }()
		defer func() { stopTrim(); <-trimDone }()
	}
	hc := overlay.DefaultConfig()
	hc.KeyFile, hc.ListenAddrs, hc.PSKFile = filepath.Join(o.data, "identity.key"), o.listen, o.psk
	h, err := overlay.NewHost(hc)
	if err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	defer h.Close()
	srvSink := &sink.Server{Store: store, Logger: slog.Default()}
	lm, err := joinNetwork(ctx, h, o, reg)
	if err != nil {
		return err
	}
	if lm != nil {
		defer lm.Close() // (its leave: the nodes stop delivering here at once)
		if o.admit == "members" {
			srvSink.Admit = sink.AdmitMembers(lm.Members())
		}
	}
	srvSink.Register(h)
	store.RegisterSubscribe(h, 30*time.Second)
	// the full-text index, fed from the log in the background (delete
	// DATA/search to rebuild it)
	idx, err := search.Open(store, filepath.Join(o.data, "search"), search.Options{Shards: o.searchShards, Logger: slog.Default()})
	if err != nil {
		return err
	}
	defer idx.Close()
	sctx, stopSearch := context.WithCancel(ctx)
	searchDone := make(chan struct{})
	go func() { defer close(searchDone); idx.Run(sctx) }()
	defer func() { stopSearch(); <-searchDone }()

	if o.stream != "" {
		pub := &jetstream.Publisher{Store: store, URL: o.stream, Logger: slog.Default()}
		pctx, stopPub := context.WithCancel(ctx)
		pubDone := make(chan struct{})
		go func() { defer close(pubDone); pub.Run(pctx) }()
		defer func() { stopPub(); <-pubDone }()
	}

	// requests see base end when the sink stops: the console's event
	// streams end with it
	base, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	srv := &http.Server{Handler: sink.Handler(store, idx, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base }}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("sink: HTTP server", "err", err)
		}
	}()
	defer func() {
		// streams end (their waits woken, the console's events told),
		// then the server, before the store closes under them
		store.Stop()
		endRequests()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
	}()
	for _, a := range h.Addrs() {
		fmt.Printf("sink listening %s/p2p/%s\n", a, h.ID())
	}
	fmt.Printf("sink streams http://%s/v1/records (head %d)\n", ln.Addr(), store.Head())
	fmt.Printf("sink console http://%s/console/\n", ln.Addr())
	<-ctx.Done()
	c, _ := store.Counts()
	slog.Info("sink stopping", "head", store.Head(), "records", c.Records, "pages", c.Pages, "carriers", c.Carriers, "overlap", c.Overlap)
	return nil
}

// joinNetwork makes the sink a light member of the network (nil when it
// neither admits members only nor announces itself).
func joinNetwork(ctx context.Context, h host.Host, o *sinkOptions, reg prometheus.Registerer) (*overlay.LightMember, error) {
	switch o.admit {
	case "members", "any":
	default:
		return nil, fmt.Errorf("sink: --admit %q: want members or any", o.admit)
	}
	if o.admit == "any" && !o.announce {
		return nil, nil
	}
	// the sink needs the snapshot's id and size only: the tree is decoded
	// here (not hierarchy.Default, which keeps it) and left to the GC
	var tree *hierarchy.Tree
	var err error
	switch {
	case o.hierarchy != "":
		tree, err = hierarchy.ReadSnapshotFile(o.hierarchy)
	case len(hierarchydata.DefaultSnapshot) == 0:
		err = errors.New("this binary has no embedded snapshot: give --hierarchy")
	default:
		tree, err = hierarchy.DecodeFile(hierarchydata.DefaultSnapshot)
	}
	if err != nil {
		return nil, fmt.Errorf("sink: hierarchy: %w", err)
	}
	snap, nodes := tree.ID(), tree.Len()
	tree = nil
	debug.FreeOSMemory() // (the decoded tree's ≈ 50 MB back to the system at once)
	// a sink on loopback only is a testnet's: no colocation penalty
	loopback := true
	for _, a := range h.Addrs() {
		loopback = loopback && manet.IsIPLoopback(a)
	}
	adm, err := sinkAdmission(o, h.ID())
	if err != nil {
		return nil, err
	}
	var membership string
	switch o.membership {
	case "heartbeat":
		membership = overlay.MembershipHeartbeat
	case "swim", "":
		membership = overlay.MembershipSWIM
	default:
		return nil, fmt.Errorf("--membership %q: want heartbeat or swim", o.membership)
	}
	lm, err := overlay.JoinMembership(ctx, h, overlay.LightConfig{Snapshot: snap, Nodes: nodes, Sink: o.announce, Membership: membership,
		Bootstrap: o.bootstrap, HeartbeatInterval: o.heartbeat, FailureTimeout: o.fail, LoopbackTestnet: loopback,
		Admission: adm, Logger: slog.Default(), Registerer: reg})
	if err != nil {
		return nil, fmt.Errorf("sink: %w", err)
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "micra", Subsystem: "sink", Name: "members_live",
		Help: "Live members of the network the sink hears (it admits carriers from these when --admit members)."},
		func() float64 { return float64(lm.Members().Count() - 1) }))
	slog.Info("sink: member of the network", "snapshot", snap.String(), "bootstrap", len(o.bootstrap), "admit", o.admit, "announce", o.announce)
	return lm, nil
}

// sinkAdmission is the sink's admission to its network (nil: an open one).
func sinkAdmission(o *sinkOptions, self peer.ID) (*overlay.Admission, error) {
	if o.network == "" {
		return nil, nil
	}
	network, err := peer.Decode(o.network)
	if err != nil {
		return nil, fmt.Errorf("sink: --network %q: not a network key id (micra admit init prints it)", o.network)
	}
	certFile, revFile := o.certificate, o.revocations
	if certFile == "" {
		certFile = filepath.Join(o.data, "membership.cert")
	}
	if revFile == "" {
		revFile = filepath.Join(o.data, "revocations")
	}
	raw, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("sink: --certificate: %w (the network's operator runs `micra admit --sink --peer %s`)", err, self)
	}
	adm, err := overlay.NewAdmission(network, raw, revFile)
	if err != nil {
		return nil, fmt.Errorf("sink: %s: %w", certFile, err)
	}
	if c := adm.OwnCertificate(); c.Peer != self {
		return nil, fmt.Errorf("sink: %s admits peer %s, but this sink is %s", certFile, c.Peer, self)
	}
	return adm, nil
}

// sinkImport commits carrier files; one line per refused file on errw.
func sinkImport(w, errw io.Writer, data string, paths []string, noSync bool) error {
	store, err := openSinkStore(data, noSync, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	var files []string
	bad, unreadable := 0, 0 // files not imported; paths not read at all
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			fmt.Fprintf(errw, "%s: %v\n", p, err)
			unreadable++
			continue
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		fs, err := pack.CarrierFiles(p)
		if err != nil {
			fmt.Fprintf(errw, "%s: %v\n", p, err)
			unreadable++
			continue
		}
		files = append(files, fs...)
	}
	var committed, duplicates, records int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			var a sink.Ack
			if a, err = store.Commit("", b); err == nil {
				if a.Duplicate {
					duplicates++
				} else {
					committed++
					records += a.Records
				}
				continue
			}
		}
		fmt.Fprintf(errw, "%s: %v\n", f, err)
		bad++
	}
	fmt.Fprintf(w, "imported %d carriers (%d records); %d committed before; head %d\n", committed, records, duplicates, store.Head())
	if bad+unreadable > 0 {
		return fmt.Errorf("sink import: %d of %d files not imported, %d paths unreadable", bad, len(files), unreadable)
	}
	return nil
}

type subscribeOptions struct {
	sink, cursorFile, host, suffix, keyword, lang string
	from                                          uint64
	follow, changed                               bool
}

func init() {
	o := &subscribeOptions{}
	cmd := &cobra.Command{
		Use:   "subscribe --sink URL [--from SEQ | --cursor-file F] [--follow] [filters]",
		Short: "print the sink's records as NDJSON from a cursor: the reference client for indexers",
		Long: `Reads the index sink's change log (GET /v1/records) and prints one JSON record per
line (docs/sink.md has the schema). --cursor-file F remembers the last record
printed (written after each line): run the same command again to resume exactly
after it, every record once and in order. --follow keeps streaming new records
until interrupted; the connection is re-established if it drops.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSubscribe(cmd.Context(), cmd.OutOrStdout(), o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.sink, "sink", "http://127.0.0.1:8090", "the sink's HTTP address, or its multiaddr with /p2p/<id> (then /micra/subscribe/1)")
	f.Uint64Var(&o.from, "from", 0, "print the records after this sequence number")
	f.StringVar(&o.cursorFile, "cursor-file", "", "file holding the last sequence printed (read at start, written after each record)")
	f.BoolVar(&o.follow, "follow", false, "keep streaming new records")
	f.StringVar(&o.host, "host", "", "only this host")
	f.StringVar(&o.suffix, "suffix", "", "only hosts in this domain")
	f.StringVar(&o.keyword, "keyword", "", "only records with this keyword (stemmed)")
	f.StringVar(&o.lang, "lang", "", "only this language")
	f.BoolVar(&o.changed, "changed", false, "only new and changed pages")
	rootCmd.AddCommand(cmd)
}

func runSubscribe(ctx context.Context, w io.Writer, o *subscribeOptions) error {
	cursor := o.from
	if o.cursorFile != "" {
		if b, err := os.ReadFile(o.cursorFile); err == nil {
			v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return fmt.Errorf("subscribe: --cursor-file %s: %q is not a sequence number", o.cursorFile, strings.TrimSpace(string(b)))
			}
			cursor = max(cursor, v)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("subscribe: --cursor-file: %w", err)
		}
	}
	var once func(cursor *uint64) (int, error)
	if strings.HasPrefix(o.sink, "/") { // a multiaddr: /micra/subscribe/1
		info, err := peer.AddrInfoFromString(o.sink)
		if err != nil {
			return fmt.Errorf("subscribe: --sink %q: want the sink's http:// address or its multiaddr with /p2p/<id>: %w", o.sink, err)
		}
		hc := overlay.DefaultConfig()
		hc.ListenAddrs = nil // (a subscriber listens on nothing)
		h, err := overlay.NewHost(hc)
		if err != nil {
			return err
		}
		defer h.Close()
		once = func(cursor *uint64) (int, error) { return subscribeLibp2p(ctx, w, h, *info, o, cursor) }
	} else {
		c, err := sink.NewHTTPClient(o.sink)
		if err != nil {
			return fmt.Errorf("subscribe: --sink %w, or its multiaddr with /p2p/<id>", err)
		}
		once = func(cursor *uint64) (int, error) {
			n, err := c.Records(ctx, *cursor, 0, o.follow, sink.Filter{Host: o.host, Suffix: o.suffix, Keyword: o.keyword, Lang: o.lang, Changed: o.changed},
				func(seq uint64, line []byte) error { return emitRecord(w, line, seq, o, cursor) })
			if err != nil {
				err = fmt.Errorf("subscribe: %w", err)
			}
			return n, err
		}
	}
	for {
		n, err := once(&cursor)
		if !o.follow || ctx.Err() != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if bs := (*sink.BeforeStartError)(nil); errors.As(err, &bs) {
			return err // (reconnecting would not help: the records are gone)
		}
		if err != nil {
			slog.Warn("subscribe: stream ended, reconnecting", "after", cursor, "err", err)
		}
		wait := time.Second
		if n > 0 {
			wait = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// subscribeLibp2p is subscribeOnce over /micra/subscribe/1.
func subscribeLibp2p(ctx context.Context, w io.Writer, h host.Host, info peer.AddrInfo, o *subscribeOptions, cursor *uint64) (int, error) {
	sub, err := sink.Subscribe(ctx, h, info, &pb.SubscribeRequest{After: *cursor, Follow: o.follow, Host: o.host, Suffix: o.suffix,
		Keyword: o.keyword, Lang: o.lang, Changed: o.changed}, 30*time.Second)
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	n := 0
	for {
		seq, rec, err := sub.Next(time.Minute) // (keep-alives come every 15 s)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if err := emitRecord(w, rec, seq, o, cursor); err != nil {
			return n, err
		}
		n++
	}
}

// emitRecord prints one record and moves the cursor (and its file).
func emitRecord(w io.Writer, line []byte, seq uint64, o *subscribeOptions, cursor *uint64) error {
	if _, err := w.Write(append(line, '\n')); err != nil {
		return err
	}
	*cursor = seq
	if o.cursorFile != "" {
		// replaced whole (a rename), never half written
		tmp := o.cursorFile + ".tmp"
		err := os.WriteFile(tmp, []byte(strconv.FormatUint(seq, 10)+"\n"), 0o644)
		if err == nil {
			err = os.Rename(tmp, o.cursorFile)
		}
		if err != nil {
			return fmt.Errorf("subscribe: --cursor-file: %w", err)
		}
	}
	return nil
}

func init() {
	var sinkURL, host string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "search --sink URL [--host H] [--limit N] WORDS…",
		Short: "search the index sink's full-text index (pages matching every word, best first)",
		Long: `Asks a running sink (GET /v1/search) for the pages whose keywords or titles match
every word; words are stemmed as the crawlers stem keywords ("headers" finds pages
about "header"). The index follows the change log in the background: "indexed"
says how far it has read.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := sink.NewHTTPClient(sinkURL)
			if err != nil {
				return fmt.Errorf("search: --sink %w", err)
			}
			res, err := c.Search(cmd.Context(), strings.Join(args, " "), host, limit)
			if err != nil {
				return fmt.Errorf("search: %w", err)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(w, res)
			}
			fmt.Fprintf(w, "%d pages (%.1f ms; index at record %d)\n", res.Total, res.TookMs, res.Indexed)
			for _, h := range res.Hits {
				fmt.Fprintf(w, "%7.3f  %s  %s\n", h.Score, h.URL, h.Title)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sinkURL, "sink", "http://127.0.0.1:8090", "the sink's HTTP address")
	f.StringVar(&host, "host", "", "only this host")
	f.IntVar(&limit, "limit", 10, "results")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON")
	rootCmd.AddCommand(cmd)
}

type exportOptions struct {
	sink, format, out string
	since             uint64
}

func init() {
	o := &exportOptions{}
	cmd := &cobra.Command{
		Use:   "export --sink URL --format warc|jsonl [--since SEQ] -o DIR",
		Short: "write the sink's records after a cursor as WARC 1.1 files or JSON lines",
		Long: `Reads a running sink's change log (GET /v1/records) after --since and writes it
to DIR: --format warc writes gzip-compressed WARC 1.1 files (a warcinfo record naming
micra, then one metadata record per page record: WARC-Target-URI the page, WARC-Date
its fetch, the block the record's JSON); --format jsonl one JSON record per line.
The last line printed names the cursor to pass as --since next time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runExport(cmd.Context(), cmd.OutOrStdout(), o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.sink, "sink", "http://127.0.0.1:8090", "the sink's HTTP address")
	f.StringVar(&o.format, "format", "warc", "warc or jsonl")
	f.StringVarP(&o.out, "out", "o", "", "directory to write into")
	f.Uint64Var(&o.since, "since", 0, "export the records after this sequence number")
	for _, c := range rootCmd.Commands() {
		if c.Name() == "sink" {
			c.AddCommand(cmd)
		}
	}
}

func runExport(ctx context.Context, w io.Writer, o *exportOptions) error {
	if o.out == "" {
		return errors.New("sink export: -o DIR is required")
	}
	c, err := sink.NewHTTPClient(o.sink)
	if err != nil {
		return fmt.Errorf("sink export: --sink %w", err)
	}
	var write func(line []byte, r *sink.StreamRecord) error
	var finish func() error
	switch o.format {
	case "warc":
		x, err := export.NewWARC(export.Options{Dir: o.out})
		if err != nil {
			return err
		}
		write = func(_ []byte, r *sink.StreamRecord) error { return x.Write(r) }
		finish = x.Close
	case "jsonl":
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		path := filepath.Join(o.out, fmt.Sprintf("micra-after-%d.jsonl", o.since))
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		bw := bufio.NewWriter(f)
		write = func(line []byte, _ *sink.StreamRecord) error {
			_, err := bw.Write(append(line, '\n'))
			return err
		}
		finish = func() error {
			if err := bw.Flush(); err != nil {
				f.Close()
				return err
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}
	default:
		return fmt.Errorf("sink export: --format %q: want warc or jsonl", o.format)
	}
	cursor := o.since
	n, err := c.Records(ctx, o.since, 0, false, sink.Filter{}, func(seq uint64, line []byte) error {
		var r sink.StreamRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return fmt.Errorf("unreadable record after %d (%v): %.200s", cursor, err, line)
		}
		if err := write(line, &r); err != nil {
			return err
		}
		cursor = seq
		return nil
	})
	if err != nil {
		finish()
		return fmt.Errorf("sink export: %w", err)
	}
	if err := finish(); err != nil {
		return err
	}
	fmt.Fprintf(w, "exported %d records to %s (%s); next time: --since %d\n", n, o.out, o.format, cursor)
	return nil
}

func init() {
	var sinkURL string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status --sink URL",
		Short: "print a running sink's status: head, records, pages, overlap, and each crawler's contribution",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := sink.NewHTTPClient(sinkURL)
			if err != nil {
				return fmt.Errorf("sink status: --sink %w", err)
			}
			st, err := sc.Status(cmd.Context())
			if err != nil {
				return fmt.Errorf("sink status: %w", err)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(w, st)
			}
			c := st.Counts
			fmt.Fprintf(w, "head %d: %d records of %d pages in %d carriers (%d redelivered, %d refused)\n",
				st.Head, c.Records, c.Pages, c.Carriers, c.Duplicates, c.Rejected)
			fmt.Fprintf(w, "overlap %d records (pages another crawler delivered before)\n", c.Overlap)
			for _, cr := range st.Crawlers {
				fmt.Fprintf(w, "  %-54s %8d records %6d carriers %6d overlap  last %s\n", cr.Crawler, cr.Records, cr.Carriers, cr.Overlap,
					cr.LastSeen.Format(time.RFC3339))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&sinkURL, "sink", "http://127.0.0.1:8090", "the sink's HTTP address")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	for _, c := range rootCmd.Commands() {
		if c.Name() == "sink" {
			c.AddCommand(cmd)
		}
	}
}
