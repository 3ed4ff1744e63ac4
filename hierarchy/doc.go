// Package hierarchy owns the IP-address hierarchy of IPMicra: a tree of IP
// ranges (IPv4 and IPv6) built from Regional Internet Registry data, each node
// carrying its registering organisation, registry, status, country and depth;
// its loaders (IANA registry CSV, RIR statistics exchange files, RPSL
// inetnum/inet6num objects, range CSV); its canonical, content-addressed
// snapshot format; and Migrate, which carries delegations across a rebuild.
//
// Every peer holds the same snapshot; a snapshot's SnapshotID is the hash of
// its canonical bytes, so peers that built from the same inputs agree.
package hierarchy
