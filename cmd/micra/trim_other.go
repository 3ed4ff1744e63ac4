//go:build !linux

package main

// releaseStartupPages does nothing outside Linux (see trim_linux.go).
func releaseStartupPages(...[]byte) (int64, error) { return 0, nil }
