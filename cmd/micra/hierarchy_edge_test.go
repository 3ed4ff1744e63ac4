package main

import (
	"strings"
	"testing"
)

// Regression (the defect it caught): `micra hierarchy lookup 8.8.8.8 bogus 1.1.1.1` prints nothing: one
// argument that is not an address aborts the command before any lookup, so
// the valid addresses are lost instead of being answered beside an error
// naming the bad one (exit status still non-zero).
func TestLookupBadAddressShowsOthers(t *testing.T) {
	out, err := runMicra(t, "hierarchy", "lookup", "8.8.8.8", "bogus", "1.1.1.1")
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("want an error naming %q, got %v", "bogus", err)
	}
	if !strings.Contains(out, "8.8.8.8") || !strings.Contains(out, "1.1.1.1") {
		t.Fatalf("the two valid addresses were not looked up; output %q, err %v", out, err)
	}
}
