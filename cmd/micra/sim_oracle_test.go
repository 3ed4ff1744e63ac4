package main

import (
	"strings"
	"testing"

	"github.com/micra-crawler/micra/testnet/sim"
)

// The oracle's flags are validated before anything is simulated.
func TestParseOracleFlags(t *testing.T) {
	for _, c := range []struct {
		oracle, epsSet, hostSet bool
		eps, host, err          string
		infos                   int
	}{
		{false, false, false, "", "both", "", 0},
		{false, true, false, "0.1", "both", "needs --oracle", 0},
		{false, false, true, "", "country", "needs --oracle", 0},
		{true, true, false, "0.1,NaN", "both", "finite", 0},
		{true, true, false, "Inf", "both", "finite", 0},
		{true, true, false, "-1", "both", "finite", 0},
		{true, true, false, "0.1,x", "both", "finite", 0},
		{true, false, true, "", "contry", "want position", 0},
		{true, true, true, "0.2, 0.05", "country", "", 1},
		{true, false, false, "", "both", "", 2},
	} {
		oc, infos, err := parseOracleFlags(c.oracle, c.epsSet, c.hostSet, c.eps, c.host)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: error %v, want %q", c, err, c.err)
			}
			continue
		}
		if err != nil || len(infos) != c.infos {
			t.Errorf("%+v: %v, %v", c, infos, err)
		}
		if c.epsSet && len(oc.Eps) != 2 {
			t.Errorf("%+v: ε %v", c, oc.Eps)
		}
		if c.infos == 1 && infos[0] != sim.OracleHostCountry {
			t.Errorf("%+v: %v", c, infos)
		}
	}
}

// --oracle-samples sets the country prior's resolution, in the default's
// proportion of draws; bad values and a use without --oracle are refused
// before anything runs.
func TestOracleSamplesFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--oracle-samples", "512"}, "--oracle-samples needs --oracle"},
		{[]string{"sim", "--oracle", "--oracle-samples", "0"}, "want 1 to 16384"},
		{[]string{"sim", "--oracle", "--oracle-samples", "99999"}, "want 1 to 16384"},
	} {
		if _, err := runMicra(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
	out, err := runMicra(t, "sim", "--hosts", "60", "--train", "40", "--crawlers", "4", "--policies", "hash",
		"--oracle", "--oracle-host", "country", "--oracle-samples", "8")
	if err != nil {
		t.Fatal(err)
	}
	// 8 × 50,000 / 256 addresses drawn
	if !strings.Contains(out, "(1562 addresses drawn") {
		t.Fatalf("--oracle-samples 8 should draw 1562 addresses:\n%s", out)
	}
}
