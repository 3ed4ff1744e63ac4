//go:build race

package overlay

// slowdown stretches the tests' waits for the race detector, which makes
// twenty libp2p hosts on two cores several times slower.
const slowdown = 4
