package node

// The settings table: every key of File with its default and meaning, and
// the three ways to give one — a TOML (or JSON) file, an environment
// variable MICRA_<KEY> and a flag --<key-with-dashes> of `micra node` — all
// driven by the table, so a key has one spelling and one meaning everywhere.

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/delegation"
)

// Setting is one key of a node's configuration.
type Setting struct {
	// Key is the file key; the environment variable is MICRA_ and the key
	// in upper case (Env), the flag the key with dashes (Flag).
	Key string
	// Group is the section it is listed under: node, overlay, crawl, sink, release.
	Group string
	// Type is what the value is: string, path (relative to the file's
	// directory when in a file), duration (a Go duration string), bool,
	// int, list (of strings: a TOML array, a repeated flag, a
	// comma-separated variable).
	Type string
	// Default is the value that means the default, written as in a TOML
	// file (`"1s"`, `64`, `true`, `["a", "b"]`); `""` for a path or
	// address the node picks itself (Meaning says which).
	Default string
	// Example is a value other than the default, as in a TOML file (for
	// the documentation and the tests).
	Example string
	// Meaning is one line on what it does.
	Meaning string

	check func(string) error // a value of a string (or list) setting
	field int                // its File field
}

// Env is the environment variable of the setting, e.g. MICRA_MIN_DELAY.
func (s Setting) Env() string { return "MICRA_" + strings.ToUpper(s.Key) }

// Flag is the flag of the setting without its dashes, e.g. min-delay.
func (s Setting) Flag() string { return strings.ReplaceAll(s.Key, "_", "-") }

// Values is a TOML literal of the setting (Default, Example) as text: the
// values File.Set takes.
func (s Setting) Values(lit string) ([]string, error) {
	var m map[string]tomlRaw
	if _, err := toml.Decode("v = "+lit, &m); err != nil {
		return nil, fmt.Errorf("setting %s: %s: %w", s.Key, lit, err)
	}
	if arr, ok := m["v"].v.([]any); ok {
		out := make([]string, 0, len(arr))
		for _, x := range arr {
			out = append(out, fmt.Sprint(x))
		}
		return out, nil
	}
	return []string{fmt.Sprint(m["v"].v)}, nil
}

// Groups are the settings' groups in the order they are listed.
var Groups = []string{"node", "overlay", "crawl", "sink", "release"}

// Settings lists every key of File (a test fails when a field has no entry
// or an entry no field), grouped, in the order config.toml lists them.
var Settings = []Setting{
	{Key: "data_dir", Group: "node", Type: "path", Default: `""`, Example: `"data"`,
		Meaning: "where the node keeps everything: identity key, crawl state, hand-off spool, carriers (required; `micra init` writes \"data\")"},
	{Key: "crawler", Group: "node", Type: "bool", Default: `true`, Example: `false`,
		Meaning: "crawl the subnets delegated to this peer and accept hand-offs; false: an overlay peer only (DHT, gossip), advertising no capacity"},
	{Key: "testnet", Group: "node", Type: "bool", Default: `false`, Example: `true`,
		Meaning: "loopback testnet defaults: listen on 127.0.0.1, probes and fetches to loopback and private addresses allowed"},
	{Key: "api", Group: "node", Type: "string", Default: `"127.0.0.1:0"`, Example: `"127.0.0.1:5001"`,
		Meaning: "the local control API (micra id, status, peers, owners, seed): host:port on loopback (port 0: a free one, named in data_dir/api), or \"off\""},
	{Key: "pprof", Group: "node", Type: "bool", Default: `false`, Example: `true`,
		Meaning: "serve /debug/pprof/ on the control API"},
	{Key: "metrics", Group: "node", Type: "string", Default: `""`, Example: `"127.0.0.1:9102"`,
		Meaning: "serve Prometheus /metrics on this host:port (e.g. 127.0.0.1:9102); empty: off"},
	{Key: "memory_limit", Group: "node", Type: "string", Default: `""`, Example: `"128MiB"`, check: checkMemoryLimit,
		Meaning: "soft limit of the Go runtime's memory (runtime/debug.SetMemoryLimit; B, KiB, MiB, GiB): the collector works harder as the heap nears it; \"off\": none; empty: GOMEMLIMIT if set, else 192MiB (testnet: 56MiB)"},

	{Key: "listen", Group: "overlay", Type: "list", Default: `["/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"]`, Example: `["/ip4/0.0.0.0/tcp/4002", "/ip6/::/tcp/4002"]`,
		Meaning: "the multiaddrs the peer listens on (testnet: [\"/ip4/127.0.0.1/tcp/0\"], and loopback only)"},
	{Key: "bootstrap", Group: "overlay", Type: "list", Default: `[]`, Example: `["/ip4/198.51.100.4/tcp/4001/p2p/12D3KooWJ6MqnVtvqV7b5bWxqbtqYuxMNwfrfNJXZ4F5bBAVLk1N"]`,
		Meaning: "peers to join through, as multiaddrs ending in /p2p/<peer id>"},
	{Key: "crawler_addr", Group: "overlay", Type: "string", Default: `""`, Example: `"203.0.113.7"`, check: checkAddr,
		Meaning: "this crawler's public IP address: the subnet it is in is delegated to it on join"},
	{Key: "capacity", Group: "overlay", Type: "int", Default: `100000`, Example: `20000`,
		Meaning: "pages per day this crawler offers, advertised to the others"},
	{Key: "policy", Group: "overlay", Type: "string", Default: `"micra"`, Example: `"ipmicra"`, check: checkPolicy,
		Meaning: "delegation policy: micra (fewest probes for the same accuracy), ipmicra (the paper's), hash, random, optimal (probes every crawler: for experiments)"},
	{Key: "private_peers", Group: "overlay", Type: "bool", Default: `false`, Example: `true`,
		Meaning: "keep peers' private and loopback addresses (a network on a LAN); false: only public ones go into the DHT and are dialled, so no member can aim this node at its own network's services (testnet: true)"},
	{Key: "identities_per_ip", Group: "overlay", Type: "int", Default: `0`, Example: `64`,
		Meaning: "open network (no network key): members whose heartbeats came over their own connection from one IP; 0: the default, 8 (testnet: no limit, every peer is at 127.0.0.1)"},
	{Key: "identities_per_peer", Group: "overlay", Type: "int", Default: `0`, Example: `2000`,
		Meaning: "open network: members one neighbour may introduce by relaying their heartbeats; 0: the default, 512"},
	{Key: "balance", Group: "overlay", Type: "string", Default: `"second-best"`, Example: `"off"`, check: checkBalance,
		Meaning: "when the nearest crawler is full: off, release (give the subnet up), second-best or least-cost (a full owner moves whichever subnet costs least to move)"},
	{Key: "balance_hold", Group: "overlay", Type: "duration", Default: `"10m"`, Example: `"1h"`, check: checkDuration,
		Meaning: "how long a delegation stands before load balancing may move it to another crawler; 0s: no hold"},
	{Key: "hierarchy", Group: "overlay", Type: "path", Default: `""`, Example: `"snap.bin"`,
		Meaning: "IP hierarchy snapshot file (micra hierarchy build); empty: the embedded one, which peers must share"},
	{Key: "key_file", Group: "overlay", Type: "path", Default: `""`, Example: `"keys/identity.key"`,
		Meaning: "the peer's Ed25519 identity key (default data_dir/identity.key, created on first start)"},
	{Key: "psk_file", Group: "overlay", Type: "path", Default: `""`, Example: `"swarm.key"`,
		Meaning: "pre-shared key of a private network (libp2p pnet; TCP only); empty: the public network"},
	{Key: "network", Group: "overlay", Type: "string", Default: `""`, Example: `"12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"`, check: checkPeerID,
		Meaning: "the network key's id (`micra admit init` prints it): join that network with admission, members only; empty: an open network, where anyone who runs micra is a member"},
	{Key: "certificate", Group: "overlay", Type: "path", Default: `""`, Example: `"membership.cert"`,
		Meaning: "this node's membership certificate from the network's operator (`micra admit`); default data_dir/membership.cert"},
	{Key: "membership", Group: "overlay", Type: "string", Default: `"swim"`, Example: `"heartbeat"`, check: checkMembership,
		Meaning: "the network's membership protocol, the same on every member (and the sink's `--membership`): swim (SWIM probes among ring neighbours: a peer's cost stays flat; docs/membership.md) or heartbeat (each member's heartbeat reaches every peer each second: a peer's cost grows with the network)"},

	{Key: "seeds", Group: "crawl", Type: "list", Default: `[]`, Example: `["https://example.org/", "https://example.net/"]`,
		Meaning: "URLs to start from, queued at start (give seeds to any one node: it hands the others' to them)"},
	{Key: "seeds_file", Group: "crawl", Type: "path", Default: `""`, Example: `"seeds.txt"`,
		Meaning: "a file of seed URLs, one per line (# comments), added to seeds"},
	{Key: "seed_members", Group: "crawl", Type: "int", Default: `0`, Example: `12`,
		Meaning: "route the seeds once this many members (this node included) are live; 0: once no member joined for 3 heartbeats"},
	{Key: "concurrency", Group: "crawl", Type: "int", Default: `64`, Example: `16`,
		Meaning: "hosts crawled in parallel"},
	{Key: "per_ip", Group: "crawl", Type: "int", Default: `2`, Example: `1`,
		Meaning: "requests in flight to one IP address"},
	{Key: "min_delay", Group: "crawl", Type: "duration", Default: `"1s"`, Example: `"2s"`, check: checkDuration,
		Meaning: "the least pause between two requests to one host (robots.txt crawl-delay can make it longer)"},
	{Key: "max_depth", Group: "crawl", Type: "int", Default: `16`, Example: `8`,
		Meaning: "links followed from a seed, at most"},
	{Key: "allow_private", Group: "crawl", Type: "bool", Default: `false`, Example: `true`,
		Meaning: "fetch private, loopback and link-local addresses too (always, with testnet)"},
	{Key: "monitor", Group: "crawl", Type: "bool", Default: `false`, Example: `true`,
		Meaning: "after the first pass, revisit pages with conditional GETs and ship what changed"},
	{Key: "carrier_hold", Group: "crawl", Type: "duration", Default: `"2s"`, Example: `"30s"`, check: checkDuration,
		Meaning: "the longest a fetched page's record waits in the outbox before its carrier is sealed and shipped (a carrier is also sealed at 1 MiB, and when the crawl is idle): longer compresses better; a crash before the carrier is shipped costs that much of the node's fetches (the rest is recovered from the sink)"},
	{Key: "sleep", Group: "crawl", Type: "duration", Default: `"24h"`, Example: `"6h"`, check: checkDuration,
		Meaning: "with monitor: the pause between two revisits of a page"},
	{Key: "sync", Group: "crawl", Type: "bool", Default: `false`, Example: `true`,
		Meaning: "fsync every commit of the crawl state (survives power loss; slower)"},

	{Key: "sink", Group: "sink", Type: "string", Default: `""`, Example: `"/ip4/203.0.113.9/tcp/4010/p2p/12D3KooWJ6MqnVtvqV7b5bWxqbtqYuxMNwfrfNJXZ4F5bBAVLk1N"`,
		Meaning: "the index sink to deliver carriers to: its multiaddr ending in /p2p/<peer id>, as `micra sink` prints it, or /p2p/<peer id> alone (addresses from its heartbeats); empty: the sink the network announces (carriers wait in the outbox while none is)"},
	{Key: "carriers", Group: "sink", Type: "path", Default: `""`, Example: `"carriers"`,
		Meaning: "write carriers to this directory instead of delivering them to a sink (offline crawls; excludes sink)"},
	{Key: "ship_links", Group: "sink", Type: "bool", Default: `true`, Example: `false`,
		Meaning: "records carry their pages' out-links: the sink's link graph, and what recovers a dead crawler's pages from the sink without fetching them again (off: they are fetched again)"},

	{Key: "auto_update", Group: "release", Type: "string", Default: `"notify"`, Example: `"off"`, check: checkAutoUpdate,
		Meaning: "signed releases (docs/releases.md): off (not checked), notify (micra status and the log say when a verified newer release is available) or on (install it, with rollback)"},
	{Key: "release_root", Group: "release", Type: "path", Default: `""`, Example: `"root.json"`,
		Meaning: "the network's trusted release root (root.json of micra release init), copied to data_dir/release on first start; later roots come only through verified rotations; empty: releases are not checked until one is installed"},
	{Key: "release_feed", Group: "release", Type: "path", Default: `""`, Example: `"releases"`,
		Meaning: "a published release repository (micra release publish --out) this node reads every minute and offers to the network; empty: releases come from the overlay only"},
	{Key: "release_feed_every", Group: "release", Type: "duration", Default: `"1m"`, Example: `"10s"`, check: checkDuration,
		Meaning: "how often the release_feed is read"},
	{Key: "release_rate", Group: "release", Type: "int", Default: `4194304`, Example: `1048576`,
		Meaning: "bytes a second this node serves release binaries at, to all members together (a volunteer's upload it may use)"},
}

// Setting returns the setting of a key.
// WithoutSettingsEnv is environ without micra's setting variables
// (MICRA_<KEY> of every setting, and MICRA_HOME): for a process that must
// read its own config.toml only (a testnet's nodes).
func WithoutSettingsEnv(environ []string) []string {
	out := environ[:0:0]
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		key, isMicra := strings.CutPrefix(name, "MICRA_")
		if _, setting := LookupSetting(strings.ToLower(key)); isMicra && (setting || key == "HOME") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func LookupSetting(key string) (Setting, bool) {
	i, ok := settingIndex[key]
	if !ok {
		return Setting{}, false
	}
	return Settings[i], true
}

var settingIndex = func() map[string]int {
	fields := map[string]int{}
	t := reflect.TypeFor[File]()
	for i := range t.NumField() {
		fields[fileKey(t.Field(i))] = i
	}
	m := make(map[string]int, len(Settings))
	for i := range Settings {
		s := &Settings[i]
		f, ok := fields[s.Key]
		if !ok {
			f = -1 // TestSettingsTableMatchesFile says so
		}
		s.field = f
		m[s.Key] = i
	}
	return m
}()

// fileKey is a File field's key: its json name.
func fileKey(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

func checkDuration(s string) error {
	if d, err := time.ParseDuration(s); err != nil || d < 0 {
		return fmt.Errorf("%q is not a duration (e.g. \"1s\", \"24h\")", s)
	}
	return nil
}

func checkAddr(s string) error {
	if _, err := netip.ParseAddr(s); err != nil {
		return fmt.Errorf("%q is not an IP address", s)
	}
	return nil
}

func checkPeerID(s string) error {
	if _, err := peer.Decode(s); err != nil {
		return fmt.Errorf("%q is not a network key id (`micra admit init` prints it)", s)
	}
	return nil
}

func checkPolicy(s string) error {
	if _, ok := policies[strings.ToLower(s)]; !ok {
		return fmt.Errorf("unknown delegation policy %q (ipmicra, micra, hash, random, optimal)", s)
	}
	return nil
}

func checkAutoUpdate(s string) error {
	_, err := ParseAutoUpdate(s)
	return err
}

func checkMembership(s string) error {
	if s != "heartbeat" && s != "swim" {
		return fmt.Errorf("%q: want heartbeat or swim", s)
	}
	return nil
}

func checkBalance(s string) error {
	_, err := delegation.ParseBalanceMode(s)
	return err
}

// Set sets one setting of f from text, as in an environment variable or on
// the command line: a list takes its values as given, any other setting
// exactly one ("true"/"false" for a bool). It checks the value as the file
// form does; the error does not name the key (the caller names its source).
func (f *File) Set(key string, values ...string) error {
	s, ok := LookupSetting(key)
	if !ok || s.field < 0 {
		return unknownSetting(key)
	}
	v := reflect.ValueOf(f).Elem().Field(s.field)
	if s.Type == "list" {
		for _, x := range values {
			if err := s.checkValue(x); err != nil {
				return err
			}
		}
		v.Set(reflect.ValueOf(slices.Clone(values)))
		return nil
	}
	if len(values) != 1 {
		return fmt.Errorf("want one value, got %d", len(values))
	}
	x := values[0]
	switch v.Kind() {
	case reflect.String:
		if err := s.checkValue(x); err != nil {
			return err
		}
		v.SetString(x)
	case reflect.Bool, reflect.Pointer:
		b, err := strconv.ParseBool(x)
		if err != nil {
			return fmt.Errorf("%q: want true or false", x)
		}
		setBool(v, b)
	case reflect.Int:
		n, err := strconv.Atoi(x)
		if err != nil {
			return fmt.Errorf("%q: want a whole number", x)
		}
		if n < 0 {
			return fmt.Errorf("%d must not be negative", n)
		}
		v.SetInt(int64(n))
	default:
		return fmt.Errorf("setting %s: unsupported field type %s", key, v.Type())
	}
	return nil
}

func (s Setting) checkValue(x string) error {
	if s.check == nil || (x == "" && s.Type != "list") {
		return nil // empty: the default
	}
	return s.check(x)
}

// setBool sets a bool or *bool field.
func setBool(v reflect.Value, b bool) {
	if v.Kind() == reflect.Pointer {
		v.Set(reflect.ValueOf(&b))
		return
	}
	v.SetBool(b)
}

// ApplyEnv sets every setting that has a non-empty environment variable
// (MICRA_MIN_DELAY=2s; a list comma-separated: MICRA_BOOTSTRAP=a,b), read
// with lookup (os.LookupEnv). Paths stay as written (relative to the working
// directory). A bad value's error names the variable.
func (f *File) ApplyEnv(lookup func(string) (string, bool)) error {
	var errs []string
	for _, s := range Settings {
		x, ok := lookup(s.Env())
		if !ok || strings.TrimSpace(x) == "" {
			continue
		}
		var vals []string
		if s.Type == "list" {
			for p := range strings.SplitSeq(x, ",") {
				if p = strings.TrimSpace(p); p != "" {
					vals = append(vals, p)
				}
			}
		} else {
			vals = []string{strings.TrimSpace(x)}
		}
		if err := f.Set(s.Key, vals...); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", s.Env(), err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("environment: %s", strings.Join(errs, "; "))
	}
	return nil
}

// EnvTypos returns a note for every MICRA_ variable of environ (os.Environ)
// that is no setting's but close to one's, e.g. MICRA_MIN_DELY: a misspelt
// variable would be ignored in silence otherwise.
func EnvTypos(environ []string) []string {
	var notes []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		key, ok := strings.CutPrefix(name, "MICRA_")
		if !ok {
			continue
		}
		key = strings.ToLower(key)
		if _, known := LookupSetting(key); known {
			continue
		}
		if s := suggest(key); s != "" {
			notes = append(notes, fmt.Sprintf("%s is not a setting's variable (did you mean MICRA_%s?)", name, strings.ToUpper(s)))
		}
	}
	return notes
}

// unknownSetting is the error for a key no setting has.
func unknownSetting(key string) error {
	if s := suggest(key); s != "" {
		return fmt.Errorf("unknown setting %q (did you mean %s?)", key, s)
	}
	return fmt.Errorf("unknown setting %q", key)
}

// suggest is the setting key nearest to key, if it is near: the same key
// spelt with dashes or capitals, or within two edits.
func suggest(key string) string {
	norm := strings.ToLower(strings.ReplaceAll(key, "-", "_"))
	best, bestD := "", 3
	for _, s := range Settings {
		if s.Key == norm {
			return s.Key
		}
		if d := editDistance(norm, s.Key); d < bestD {
			best, bestD = s.Key, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
