package cluster

import "testing"

// The sink runs the membership protocol the nodes are given: a network's
// members must all run the same.
func TestMembershipArg(t *testing.T) {
	for want, args := range map[string][]string{
		"":          {"--balance=release"},
		"heartbeat": {"--membership=heartbeat"},
		"swim":      {"--membership", "heartbeat", "--carrier-hold=2s", "--membership=swim"},
	} {
		if got := membershipArg(args); got != want {
			t.Errorf("%q: %q, want %q", args, got, want)
		}
	}
}
