package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runMicra runs the CLI in-process with fresh flag values.
func runMicra(t *testing.T, args ...string) (string, error) {
	t.Helper()
	resetFlags(t, rootCmd)
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&out)
	rootCmd.SetArgs(args)
	// a fresh context: cobra keeps the last ExecuteContext's, which another
	// test may have let expire
	err := rootCmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestHierarchyCLI(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "s.bin")
	d := "../../data/hierarchy/"
	out, err := runMicra(t, "hierarchy", "build",
		"--iana", d+"iana-ipv4-address-space.csv",
		"--rir", d+"delegated-afrinic-extended-20230323.gz",
		"--rpsl", "../../hierarchy/testdata/afrinic.db.sample",
		"--ranges", "../../hierarchy/testdata/asn-ipv4-sample.csv",
		"-o", snap)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if !strings.Contains(out, "wrote "+snap) || !strings.Contains(out, "height") {
		t.Fatalf("build output:\n%s", out)
	}
	tr, err := hierarchy.ReadSnapshotFile(snap)
	if err != nil {
		t.Fatal(err)
	}

	out, err = runMicra(t, "hierarchy", "lookup", "--json", "--snapshot", snap, "196.216.2.1", "1.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	var res []LookupResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(res) != 2 || res[0].Path[0].ID != hierarchy.Root || res[0].Smallest != tr.Lookup(mustAddr("196.216.2.1")) {
		t.Fatalf("lookup: %+v", res)
	}
	last := res[1].Path[len(res[1].Path)-1]
	if last.Org != "Cloudflare, Inc." || last.ASN != 13335 || last.Range != "1.0.0.0/24" {
		t.Errorf("1.0.0.1 leaf: %+v", last)
	}

	out, err = runMicra(t, "hierarchy", "stats", "--json", "--snapshot", snap)
	if err != nil {
		t.Fatal(err)
	}
	var st StatsReport
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if st.Nodes != tr.Len() || st.Height != tr.Height() || st.Bytes != len(tr.Encode()) || len(st.PerLevel) != st.Height+1 {
		t.Errorf("stats: %+v", st)
	}

	out, err = runMicra(t, "hierarchy", "diff", "--json", snap, snap)
	if err != nil {
		t.Fatal(err)
	}
	var df DiffReport
	if err := json.Unmarshal([]byte(out), &df); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if df.SameRange != tr.Len()-1 || df.SameAttributes != df.SameRange || df.Added != 0 || df.MovedUp != 0 {
		t.Errorf("diff of a snapshot with itself: %+v", df)
	}

	// Strict by default: a bad line fails with file:line.
	bad := filepath.Join(dir, "bad.csv")
	writeFile(t, bad, "1.0.0.0,1.0.0.255,1,a\n1.0.1.0,nope,2,b\n")
	_, err = runMicra(t, "hierarchy", "build", "--ranges", bad, "-o", filepath.Join(dir, "x.bin"))
	if err == nil || !strings.Contains(err.Error(), "bad.csv:2: bad end address") {
		t.Errorf("strict build: %v", err)
	}
	out, err = runMicra(t, "hierarchy", "build", "--lenient", "--ranges", bad, "-o", filepath.Join(dir, "x.bin"))
	if err != nil || !strings.Contains(out, "1 skipped") {
		t.Errorf("lenient build: %v\n%s", err, out)
	}
}

// resetFlags puts every flag of c and its subcommands back to its default:
// the command tree is a package variable, and pflag keeps the values of a
// previous Execute (with -count=2 a run inherited the last run's --ranges).
func resetFlags(t *testing.T, c *cobra.Command) {
	t.Helper()
	reset := func(f *pflag.Flag) {
		var err error
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			var def []string
			if d := strings.Trim(f.DefValue, "[]"); d != "" {
				def = strings.Split(d, ",")
			}
			err = sv.Replace(def)
		} else {
			err = f.Value.Set(f.DefValue)
		}
		if err != nil {
			t.Fatalf("reset --%s to %q: %v", f.Name, f.DefValue, err)
		}
		f.Changed = false
	}
	c.Flags().VisitAll(reset)
	c.PersistentFlags().VisitAll(reset)
	for _, sub := range c.Commands() {
		resetFlags(t, sub)
	}
}

func TestHierarchyLookupDefault(t *testing.T) {
	out, err := runMicra(t, "hierarchy", "lookup", "--json=false", "--snapshot", "", "8.8.8.8", "2001:4860:4860::8888")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Google LLC") || !strings.Contains(out, "smallest non-unary") {
		t.Errorf("lookup on the embedded default:\n%s", out)
	}
	if _, err := runMicra(t, "hierarchy", "lookup", "not-an-ip"); err == nil {
		t.Error("bad address accepted")
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
