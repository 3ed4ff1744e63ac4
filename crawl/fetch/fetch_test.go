package fetch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testFetcher returns a fetcher for loopback test servers: private
// destinations allowed, no politeness floor.
func testFetcher(t *testing.T, mod func(*Config)) *Fetcher {
	t.Helper()
	cfg := Config{
		AllowPrivate: true,
		NoDelay:      true,
		DelayFactor:  -1,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mod != nil {
		mod(&cfg)
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

func wantReason(t *testing.T, err error, r Reason) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error with reason %s, got nil", r)
	}
	if got := ReasonOf(err); got != r {
		t.Fatalf("want reason %s, got %s (%v)", r, got, err)
	}
	if !errors.Is(err, &Error{Reason: r}) {
		t.Fatalf("errors.Is does not match reason %s", r)
	}
}

func TestFetchBasic(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		if _, _, ok := r.BasicAuth(); ok {
			t.Error("credentials from the URL were sent")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		io.WriteString(w, "<html><title>hi</title></html>")
	}))
	defer srv.Close()
	f := testFetcher(t, nil)
	ctx := context.Background()
	resp, err := f.Fetch(ctx, Request{URL: strings.Replace(srv.URL, "http://", "http://user:secret@", 1) + "/page#frag"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.FinalURL != srv.URL+"/page" {
		t.Fatalf("final URL %s", resp.FinalURL)
	}
	if resp.Status != 200 || string(resp.Body) != "<html><title>hi</title></html>" || resp.ContentType != "text/html" || resp.Charset != "utf-8" {
		t.Fatalf("bad response %+v body %q", resp, resp.Body)
	}
	if resp.ETag != `"v1"` || resp.Timing.Total <= 0 || resp.Timing.FirstByte <= 0 || !resp.RemoteIP.IsLoopback() {
		t.Fatalf("bad metadata %+v", resp)
	}
	resp, err = f.Fetch(ctx, Request{URL: srv.URL + "/page", ETag: resp.ETag})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.NotModified || resp.Status != 304 || resp.Body != nil {
		t.Fatalf("want 304, got %+v", resp)
	}
	_ = time.Second
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
