package sink

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// readStream reads NDJSON lines (blank keep-alive lines skipped) until n
// records came or the body ends.
func readStream(t *testing.T, body *bufio.Scanner, n int) []StreamRecord {
	t.Helper()
	var out []StreamRecord
	for len(out) < n && body.Scan() {
		line := strings.TrimSpace(body.Text())
		if line == "" {
			continue
		}
		var r StreamRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func get(t *testing.T, ctx context.Context, u string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A subscriber that stops and resumes from the last seq it saw receives
// every record after it exactly once, in order — records committed while
// it was away and while it follows the stream live.
func TestStreamResumesExactlyOnce(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	srv := httptest.NewServer(Handler(s, nil, nil))
	defer srv.Close()
	if _, err := s.Commit("c1", carrier("c1", 0, 0, 5)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	resp := get(t, ctx, srv.URL+"/v1/records?after=0&limit=3")
	first := readStream(t, bufio.NewScanner(resp.Body), 10)
	resp.Body.Close()
	if len(first) != 3 || first[0].Seq != 1 || first[2].Seq != 3 || first[0].URL == "" || first[0].Keywords[0].Term != "alpha" {
		t.Fatalf("first read: %+v", first)
	}
	if _, err := s.Commit("c1", carrier("c1", 1, 5, 2)); err != nil { // while away
		t.Fatal(err)
	}
	fctx, fcancel := context.WithCancel(ctx)
	resp = get(t, fctx, srv.URL+"/v1/records?follow=true&after="+"3")
	sc := bufio.NewScanner(resp.Body)
	got := readStream(t, sc, 4)                                   // 4, 5, 6, 7
	go func() { _, _ = s.Commit("c1", carrier("c1", 2, 7, 2)) }() // live
	got = append(got, readStream(t, sc, 2)...)
	fcancel()
	resp.Body.Close()
	for i, r := range got {
		if r.Seq != uint64(4+i) {
			t.Fatalf("resumed stream %d: seq %d, want %d (%+v)", i, r.Seq, 4+i, got)
		}
	}
	if len(got) != 6 {
		t.Fatalf("resumed stream: %d records, want 6", len(got))
	}
}

// Server-Sent Events carry the seq as the event id, and a reconnecting
// EventSource resumes from Last-Event-ID.
func TestEventsResumeFromLastEventID(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	srv := httptest.NewServer(Handler(s, nil, nil))
	defer srv.Close()
	if _, err := s.Commit("c1", carrier("c1", 0, 0, 4)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// the URL a browser's EventSource was given, asked again with the id it saw last
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/events?after=0", nil)
	req.Header.Set("Last-Event-ID", "2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var ids []string
	for len(ids) < 2 && sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			ids = append(ids, id)
		}
	}
	if strings.Join(ids, ",") != "3,4" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("event ids %v (%s)", ids, resp.Header.Get("Content-Type"))
	}
}

// A bad parameter is a 400 naming it; an unknown path a 404.
func TestStreamBadQuery(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	srv := httptest.NewServer(Handler(s, nil, nil))
	defer srv.Close()
	for path, want := range map[string]int{"/v1/records?after=x": 400, "/v1/records?limit=-1": 400,
		"/v1/records?follow=maybe": 400, "/nope": 404, "/v1/status": 200} {
		resp := get(t, context.Background(), srv.URL+path)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}
