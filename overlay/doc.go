// Package overlay owns micra's peer-to-peer layer: the libp2p host (Noise,
// yamux, TCP and QUIC, persistent Ed25519 identity, resource and connection
// managers, optional private network), the Kademlia DHT that stores
// delegation records (/micra/deleg/<subnet>) and holder sets (provider
// records), the membership (SWIM on /micra/swim/1 by default, package
// swim's state machine; or heartbeats on the gossipsub topic
// micra/membership/1), the gossipsub topic micra/calibration/1, and the
// request/response protocols
// /micra/probe/1, /micra/endorse/1, /micra/handoff/1, /micra/snapshot/1 and
// /micra/recover/1, and the durable spool (Badger) that holds handed-off
// URLs until their owner acknowledges them.
//
// It implements the delegation engine's Directory (DHT + gossip-invalidated
// cache), Prober (probe RPCs), Membership (Members: either protocol's view,
// with the crawlers' stated positions, the owner grace and the quorum) and
// LoadBook (fed by the loads members state) so that the
// pure delegation logic in package delegation runs unchanged across peers
// with no coordinator.
package overlay
