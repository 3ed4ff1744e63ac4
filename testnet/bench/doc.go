// Package bench owns micra's experiments that measure it beside a peer in
// the same run, behind `micra bench`: the crawl experiment (RunCrawl: the
// synthetic web of testnet/synthweb crawled by Colly and by micra's crawl
// engine) and the overlay experiment (RunOverlay: in-process libp2p peers on
// 127.0.0.1 placed as the crawlers of the simulator's world, their lookups,
// gossip, failure detection, hand-offs and delegation quality beside the
// simulator's own figures from testnet/sim). Each takes an options struct
// and returns a report whose JSON is what `micra bench … --json` prints; the
// command only parses flags and prints.
package bench
