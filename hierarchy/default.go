package hierarchy

import (
	"bytes"
	"sync"

	hierarchydata "github.com/micra-crawler/micra/data/hierarchy"
)

var defaultOnce = sync.OnceValues(func() (*Tree, error) {
	rs, _, err := LoadIANA(bytes.NewReader(hierarchydata.IANAIPv4), LoadOptions{Name: "iana-ipv4-address-space.csv"})
	if err != nil {
		return nil, err
	}
	b := NewBuilder()
	for _, r := range rs {
		if err := b.Add(r); err != nil {
			return nil, err
		}
	}
	t, _, err := b.Build()
	return t, err
})

// Default returns the embedded default hierarchy, decoded once and shared.
func Default() (*Tree, error) { return defaultOnce() }
