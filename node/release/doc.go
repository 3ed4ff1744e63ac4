// Package release owns micra's signed releases: a repository of The Update
// Framework (TUF) metadata for micra binaries, kept by the network's
// operators, and the verifier a node uses to decide whether a release it was
// handed is one those operators signed.
//
// The repository has the four top-level TUF roles — root, targets, snapshot
// and timestamp — each with its own Ed25519 keys, a signature threshold and
// an expiry. Root keys sign only root metadata and are meant to be kept
// offline; rotating any role's key is a new root version signed by the old
// and the new root keys, so a node that trusts root version N follows the
// chain to N+k by itself. A target is one binary for one OS/architecture; its
// custom metadata carries the release's version and rollout window.
//
// A node trusts one root (copied into its data directory when it is set up)
// and refuses, with a reason it can report, a binary whose hash or length
// differs from the targets metadata, metadata signed by fewer keys than its
// role's threshold, expired metadata, metadata or a release older than what
// it already accepted or runs, and metadata of another network (signed by
// keys its root does not name).
//
// The package holds no network code: the bytes come from the overlay or a
// directory, and the clock is the caller's.
package release
