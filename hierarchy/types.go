package hierarchy

import "encoding/hex"

// NodeID identifies a node within one snapshot. IDs are stable for a given
// snapshot (the same bytes always give the same IDs) and are assigned in
// address order, so iterating IDs visits ranges in address order. Root is the
// virtual root above the IPv4 and IPv6 spaces.
type NodeID uint32

// Root is the ID of the virtual root of every tree.
const Root NodeID = 0

// None is returned where no node applies (e.g. the parent of Root).
const None NodeID = ^NodeID(0)

// OrgID is an interned organisation identifier within one snapshot; 0 means
// "unknown organisation".
type OrgID uint32

// SnapshotID is the SHA-256 of a snapshot's canonical encoding.
type SnapshotID [32]byte

// String returns the id in hex.
func (s SnapshotID) String() string { return hex.EncodeToString(s[:]) }
