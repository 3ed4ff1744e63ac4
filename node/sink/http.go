package sink

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/console"
)

// StreamRecord is one line of the NDJSON stream and one SSE event's data:
// the change-log position, then the record (pack.RecordJSON's fields,
// flattened). docs/sink.md documents it.
type StreamRecord struct {
	Seq        uint64    `json:"seq"`
	IngestedAt time.Time `json:"ingested_at"`
	Overlap    bool      `json:"overlap,omitempty"`
	pack.RecordJSON
}

// StreamEntry is the streamed form of a log entry.
func StreamEntry(e *Entry) StreamRecord {
	return StreamRecord{Seq: e.Seq, IngestedAt: e.IngestedAt, Overlap: e.Overlap, RecordJSON: e.Record.JSON(e.Carrier)}
}

// Status is the sink's status document (GET /v1/status).
type Status struct {
	Head uint64 `json:"head"` // sequence of the last committed record
	// Start is the first sequence the log holds: 1, unless its retention
	// dropped records (a cursor before Start-1 is answered 410 Gone).
	Start uint64 `json:"start"`
	// SearchIndexed is the last sequence the full-text index holds, when
	// the sink runs one (Head minus it: the index's backlog).
	SearchIndexed *uint64         `json:"search_indexed,omitempty"`
	Counts        Counts          `json:"counts"`
	Crawlers      []CrawlerCounts `json:"crawlers"`
}

// Handler serves the sink's HTTP API:
//
//	GET /v1/records?after=SEQ&limit=N&follow=1&host=H&suffix=D&keyword=K&lang=L&changed=1
//	    NDJSON, one StreamRecord per line, in change-log order; with follow
//	    the response stays open and streams new records as they commit
//	GET /v1/events?after=SEQ&…  the same as Server-Sent Events (id: seq;
//	    a reconnecting EventSource resumes from Last-Event-ID)
//	GET /v1/status             Status as JSON
//	GET /v1/readers            the open streams and their cursors (ReadersInfo)
//	GET /console/              the web console's sink page (ConsoleSink as JSON)
//	GET /v1/search?q=WORDS[&host=H][&limit=N]  Results as JSON (with a Search)
//
// A subscriber that resumes from the last seq it saw receives every record
// after it exactly once, in order.
// Searcher answers full-text queries over the log (node/sink/search).
type Searcher interface {
	Query(q, host string, limit int) (Results, error)
	// Indexed is the last log sequence the index holds.
	Indexed() uint64
}

// Hit is one search result.
type Hit struct {
	URL   string  `json:"url"`
	Title string  `json:"title,omitempty"`
	Lang  string  `json:"lang,omitempty"`
	Seq   uint64  `json:"seq"` // the record the page was indexed from
	Score float64 `json:"score"`
}

// Results is a search's answer.
type Results struct {
	Total   uint64  `json:"total"`
	TookMs  float64 `json:"took_ms"`
	Indexed uint64  `json:"indexed"` // the log sequence the index had reached
	Hits    []Hit   `json:"hits"`
}

func Handler(s *Store, search Searcher, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	if search != nil {
		mux.HandleFunc("GET /v1/search", func(w http.ResponseWriter, r *http.Request) { serveSearch(search, w, r) })
	}
	mux.HandleFunc("GET /v1/records", func(w http.ResponseWriter, r *http.Request) { serveStream(s, w, r, false) })
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) { serveStream(s, w, r, true) })
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, status(s, search)) })
	mux.HandleFunc("GET /v1/readers", func(w http.ResponseWriter, r *http.Request) {
		rs, unlisted := s.Readers()
		writeJSON(w, ReadersInfo{Readers: rs, Unlisted: unlisted})
	})
	// the web console's sink page (docs/console.md): read-only, over
	// the same answers
	mux.Handle("GET "+console.Prefix, consoleHandler(s, search))
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return mux
}

// ReadersInfo is GET /v1/readers: the open subscription streams.
type ReadersInfo struct {
	Readers  []ReaderInfo `json:"readers"`
	Unlisted int64        `json:"unlisted"` // open past MaxReaders, counted only
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

type streamQuery struct {
	after  uint64
	limit  int // 0: no limit
	follow bool
	filter Filter
}

func parseQuery(r *http.Request, sse bool) (streamQuery, error) {
	q := r.URL.Query()
	var sq streamQuery
	var err error
	after := q.Get("after")
	if id := r.Header.Get("Last-Event-ID"); sse && id != "" {
		// a reconnecting EventSource asks again for the URL it was given
		// (after=0, say) with the id it saw last: that id wins
		after = id
	}
	if after != "" {
		if sq.after, err = strconv.ParseUint(after, 10, 64); err != nil {
			return sq, fmt.Errorf("after=%q: want a record sequence number (0 for the start)", after)
		}
	}
	if l := q.Get("limit"); l != "" {
		if sq.limit, err = strconv.Atoi(l); err != nil || sq.limit < 0 {
			return sq, fmt.Errorf("limit=%q: want a count ≥ 0 (0: no limit)", l)
		}
	}
	boolean := func(name string) (bool, error) {
		v := q.Get(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%s=%q: want true or false", name, v)
		}
		return b, nil
	}
	if sq.follow, err = boolean("follow"); err != nil {
		return sq, err
	}
	if sse {
		sq.follow = true
	}
	if sq.filter.Changed, err = boolean("changed"); err != nil {
		return sq, err
	}
	sq.filter.Host, sq.filter.Suffix, sq.filter.Keyword, sq.filter.Lang = q.Get("host"), q.Get("suffix"), q.Get("keyword"), q.Get("lang")
	return sq, nil
}

func serveStream(s *Store, w http.ResponseWriter, r *http.Request, sse bool) {
	sq, err := parseQuery(r, sse)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if start := s.Start(); sq.after+1 < start {
		// told plainly, not skipped: the reader decides where to resume
		http.Error(w, (&BeforeStartError{Cursor: sq.after, Start: start}).Error(), http.StatusGone)
		return
	}
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.Header().Set("X-Micra-Head", strconv.FormatUint(s.Head(), 10))
	kind := "ndjson"
	if sse {
		kind = "sse"
	}
	rd := s.readers.add(kind, r.RemoteAddr, sq.follow, sq.filter, sq.after)
	defer rd.done()
	flusher, _ := w.(http.Flusher)
	if flusher != nil && sq.follow {
		// the headers now: a follower at the head knows it is connected
		// before the first record
		w.WriteHeader(http.StatusOK)
		flusher.Flush()
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	ctx := r.Context()
	cursor, sent := sq.after, 0
	for ctx.Err() == nil {
		batch := 1000
		if sq.limit > 0 {
			batch = min(batch, sq.limit-sent)
		}
		es, last, err := s.Read(cursor, batch, sq.filter)
		if err != nil {
			// the stream may have begun: a line the client cannot parse
			// rather than a silent end it would take for the head
			fmt.Fprintf(w, "{\"error\":%q}\n", err.Error())
			return
		}
		for i := range es {
			if sse {
				fmt.Fprintf(w, "id: %d\nevent: record\ndata: ", es[i].Seq)
			}
			if err := enc.Encode(StreamEntry(&es[i])); err != nil {
				return
			}
			if sse {
				fmt.Fprint(w, "\n")
			}
		}
		sent += len(es)
		cursor = last
		rd.advance(cursor, len(es))
		if flusher != nil && len(es) > 0 {
			flusher.Flush()
		}
		if sq.limit > 0 && sent >= sq.limit {
			return
		}
		if last < s.Head() {
			continue // more to scan
		}
		if !sq.follow {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		more := s.Wait(wctx, cursor)
		cancel()
		if !more && ctx.Err() == nil {
			if wctx.Err() == nil {
				return // the store closed
			}
			// idle: a comment (SSE) or a blank line keeps proxies from
			// closing a quiet stream; NDJSON readers skip blank lines
			if sse {
				fmt.Fprint(w, ": idle\n\n")
			} else {
				fmt.Fprint(w, "\n")
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
}

func serveSearch(search Searcher, w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 10
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			http.Error(w, fmt.Sprintf("limit=%q: want a count ≥ 1", l), http.StatusBadRequest)
			return
		}
		limit = n
	}
	res, err := search.Query(q.Get("q"), q.Get("host"), limit)
	if err != nil {
		http.Error(w, "q: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(res)
}
