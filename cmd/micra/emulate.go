package main

// `micra node --emulate WORLD --emulate-peer I`: the node stands at peer I's
// place in a testnet's emulated world (testnet/emu).

import (
	"context"
	"fmt"

	golog "github.com/ipfs/go-log/v2"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/testnet/emu"
)

// applyEmulation places cfg's node at peer i of the world in file: its
// address, position and capacity, its fetches' latency and names, its
// address mapper, its prober, and the round trips of the connections it
// dials to other peers.
func applyEmulation(ctx context.Context, cfg *node.Config, file string, i int) error {
	spec, err := emu.Load(file)
	if err != nil {
		return fmt.Errorf("node: --emulate: %w", err)
	}
	w, err := emulatedWorld(ctx, cfg, spec)
	if err != nil {
		return fmt.Errorf("node: --emulate %s: %w", file, err)
	}
	pl, err := w.At(i)
	if err != nil {
		return fmt.Errorf("node: --emulate-peer: %w", err)
	}
	self := pl.Self()
	cfg.Overlay.CrawlerAddr = self.Addr
	cfg.Overlay.Lat, cfg.Overlay.Lon, cfg.Overlay.HasPos = self.Lat, self.Lon, self.HasPos
	if self.Capacity > 0 {
		cfg.Overlay.Capacity = self.Capacity
	}
	cfg.Crawl.Fetch.Emulator = pl
	cfg.Crawl.Fetch.Resolver = pl
	cfg.AddrMapper = pl.MapAddr
	cfg.Measurer = pl
	cfg.World = pl // the console draws each crawled host at its place
	cfg.Overlay.ProbeGuard = pl.Guard
	cfg.Overlay.WireDelay = pl.WireRTT
	// The emulated wire wraps each dialled TCP connection, which hides its
	// keep-alive methods from libp2p's TCP transport: it would log an error
	// for every connection. Nothing is wrong with them.
	if err := golog.SetLogLevel("tcp-tpt", "fatal"); err != nil {
		return fmt.Errorf("node: --emulate: %w", err)
	}
	return nil
}

// emulatedWorld builds the world of spec: from the placement it carries
// (what `micra testnet up` writes: no hierarchy or geolocation table
// needed), else by placing it over cfg's hierarchy as the supervisor did.
func emulatedWorld(ctx context.Context, cfg *node.Config, spec emu.Spec) (*emu.World, error) {
	if spec.Placed() {
		return spec.BuildPlaced()
	}
	tree := cfg.Hierarchy
	if tree == nil {
		var err error
		if cfg.HierarchyFile != "" {
			tree, err = hierarchy.ReadSnapshotFile(cfg.HierarchyFile)
		} else {
			tree, err = hierarchy.Default()
		}
		if err != nil {
			return nil, fmt.Errorf("hierarchy: %w", err)
		}
		cfg.Hierarchy, cfg.HierarchyFile = tree, ""
	}
	return spec.Build(ctx, tree)
}
