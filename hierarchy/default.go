package hierarchy

import (
	"errors"
	"sync"

	hierarchydata "github.com/micra-crawler/micra/data/hierarchy"
)

var defaultOnce = sync.OnceValues(func() (*Tree, error) {
	if len(hierarchydata.DefaultSnapshot) == 0 {
		return nil, errors.New("hierarchy: this binary was built without the default snapshot (tag nodefaultsnapshot)")
	}
	return DecodeFile(hierarchydata.DefaultSnapshot)
})

// Default returns the embedded default hierarchy (built by `make snapshot`
// from the IANA registries, the AFRINIC and LACNIC delegation statistics and
// the @ip-location-db/asn range CSVs), decoded once and shared.
func Default() (*Tree, error) { return defaultOnce() }
