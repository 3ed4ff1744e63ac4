// Package pb holds the generated protobuf messages of the micra index
// sink's carrier protocol. Source: sink.proto.
package pb
