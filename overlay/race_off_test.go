//go:build !race

package overlay

const slowdown = 1
