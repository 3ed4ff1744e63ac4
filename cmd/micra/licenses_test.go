package main

import (
	"os"
	"strings"
	"testing"

	hierarchydata "github.com/micra-crawler/micra/data/hierarchy"
)

// readRepoFile reads a file of the source tree relative to the repository root.
func readRepoFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile("../../" + path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lineWith is the line of text that contains every one of keys: the
// attribution line a licence asks for, taken from the file itself.
func lineWith(t *testing.T, file, text string, keys ...string) string {
	t.Helper()
next:
	for _, l := range strings.Split(text, "\n") {
		for _, k := range keys {
			if !strings.Contains(l, k) {
				continue next
			}
		}
		return l
	}
	t.Fatalf("%s has no line with %q: the attribution its licence requires is gone", file, keys)
	return ""
}

// `micra licenses` prints, for every embedded dataset, the attribution kept
// beside the data in the source tree — the files on disk, not copies — and
// --full adds the licence texts.
func TestLicensesPrintsAttributions(t *testing.T) {
	out, err := runMicra(t, "licenses")
	if err != nil {
		t.Fatalf("micra licenses: %v\n%s", err, out)
	}
	hier := readRepoFile(t, "data/hierarchy/ATTRIBUTION.md")
	geoAttr := readRepoFile(t, "data/geo/ATTRIBUTION.md")
	dspl := readRepoFile(t, "delegation/DSPL-LICENSE")
	ccby := readRepoFile(t, "data/hierarchy/LICENCE-CC-BY-4.0.txt")
	dbip := readRepoFile(t, "data/geo/DBIP-LICENSE")
	required := []string{
		lineWith(t, "data/geo/ATTRIBUTION.md", geoAttr, "<a href='https://db-ip.com'>IP Geolocation by DB-IP</a>"),
		lineWith(t, "delegation/DSPL-LICENSE", dspl, "Copyright", "Google"),
	}
	attributions := map[string]string{"data/geo/ATTRIBUTION.md": geoAttr, "delegation/DSPL-LICENSE": dspl}
	texts := map[string]string{"DBIP-LICENSE": dbip}
	if len(hierarchydata.DefaultSnapshot) > 0 { // not left out by -tags nodefaultsnapshot
		required = append(required,
			lineWith(t, "data/hierarchy/ATTRIBUTION.md", hier, "@ip-location-db/asn", "CC BY 4.0", "RouteViews"),
			lineWith(t, "data/hierarchy/ATTRIBUTION.md", hier, "distributed under the"))
		attributions["data/hierarchy/ATTRIBUTION.md"] = hier
		texts["LICENCE-CC-BY-4.0.txt"] = ccby
	}
	for _, l := range required {
		if !strings.Contains(out, l) {
			t.Errorf("micra licenses lacks the attribution line %q", l)
		}
	}
	for name, text := range attributions {
		if !strings.Contains(out, text) {
			t.Errorf("micra licenses does not print %s in full", name)
		}
	}
	if strings.Contains(out, ccby) || strings.Contains(out, dbip) {
		t.Error("micra licenses without --full prints licence texts")
	}

	full, err := runMicra(t, "licenses", "--full")
	if err != nil {
		t.Fatalf("micra licenses --full: %v\n%s", err, full)
	}
	for name, text := range texts {
		if !strings.Contains(full, text) {
			t.Errorf("micra licenses --full does not print %s", name)
		}
	}
	if !strings.Contains(full, geoAttr) {
		t.Error("micra licenses --full drops the attributions")
	}

	help, err := runMicra(t, "--help")
	if err != nil || !strings.Contains(help, "micra licenses") {
		t.Errorf("micra --help does not point to micra licenses (err %v):\n%s", err, help)
	}
}
