// Package pb holds the generated protobuf messages of the micra overlay
// protocols (probe, endorse, hand-off, snapshot, page recovery) and of its
// DHT records and gossip events. Source: overlay.proto.
package pb
