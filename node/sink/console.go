package sink

import (
	"net/http"
	"sort"
	"time"

	"github.com/micra-crawler/micra/node/console"
)

// ConsoleSink is the console's sink page as JSON (GET /console/sink.json):
// the status document, the ingest over recent windows, and the open
// subscription streams with their cursors. docs/console.md.
type ConsoleSink struct {
	At time.Time `json:"at"`
	Status
	// IndexBacklog is the head minus search_indexed: records the
	// full-text index has not taken yet (absent without an index).
	IndexBacklog *uint64 `json:"index_backlog,omitempty"`
	// Search: the sink answers GET /v1/search (the page's search box).
	Search bool `json:"search"`
	// Ingest is the records committed over each recent window, read from
	// the log's commit times (Store.IngestedSince).
	Ingest []IngestRate `json:"ingest"`
	// Readers are the open subscription streams (at most MaxReaders);
	// ReadersUnlisted how many more are open.
	Readers         []ReaderInfo `json:"readers"`
	ReadersUnlisted int64        `json:"readers_unlisted"`
	Error           string       `json:"error,omitempty"` // the ingest rate could not be read
}

// IngestRate is the ingest over one window.
type IngestRate struct {
	WindowS float64 `json:"window_s"`
	Records uint64  `json:"records"` // committed in the window
	PerS    float64 `json:"per_s"`   // Records / WindowS
}

// ingestWindows are the windows the sink page shows the ingest rate over.
var ingestWindows = []time.Duration{10 * time.Second, time.Minute, 5 * time.Minute, time.Hour}

// status reads the status document.
func status(s *Store, search Searcher) Status {
	c, cr := s.Counts()
	sort.Slice(cr, func(i, j int) bool { return cr[i].Crawler < cr[j].Crawler })
	st := Status{Head: s.Head(), Start: s.Start(), Counts: c, Crawlers: cr}
	if search != nil {
		n := search.Indexed()
		st.SearchIndexed = &n
	}
	return st
}

// ConsoleView is the sink page's JSON as of now.
func ConsoleView(s *Store, search Searcher, now time.Time) ConsoleSink {
	v := ConsoleSink{At: now.UTC(), Status: status(s, search), Search: search != nil}
	if ix := v.SearchIndexed; ix != nil {
		b := uint64(0)
		if v.Head > *ix {
			b = v.Head - *ix
		}
		v.IndexBacklog = &b
	}
	v.Ingest = make([]IngestRate, 0, len(ingestWindows))
	for _, w := range ingestWindows {
		n, err := s.IngestedSince(now.Add(-w))
		if err != nil {
			v.Error = err.Error()
			break
		}
		v.Ingest = append(v.Ingest, IngestRate{WindowS: w.Seconds(), Records: n, PerS: float64(n) / w.Seconds()})
	}
	v.Readers, v.ReadersUnlisted = s.Readers()
	return v
}

// consoleHandler serves the web console's sink page (node/console).
func consoleHandler(s *Store, search Searcher) http.Handler {
	return console.Handler(console.Views{Sink: func(*http.Request) any { return ConsoleView(s, search, time.Now()) }})
}
