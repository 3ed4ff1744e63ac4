package crawl_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"sync"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// Embedding the crawler: crawl a small site on loopback to the end and
// consume its records directly (OnRecord), without carriers.
func ExampleNew() {
	pages := map[string]string{
		"/":  `<html><head><title>Home</title></head><body><a href="/a">a</a> <a href="/b">b</a></body></html>`,
		"/a": `<html><head><title>Alpha</title></head><body>alpha pages link <a href="/b">b</a></body></html>`,
		"/b": `<html><head><title>Beta</title></head><body>beta back <a href="/">home</a></body></html>`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	state, err := os.MkdirTemp("", "crawl-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(state)

	var mu sync.Mutex
	var got []string
	eng, err := crawl.New(crawl.Config{
		StateDir: state,
		Seeds:    []string{srv.URL + "/"},
		// a testnet on loopback: the guard would refuse it otherwise
		Fetch: fetch.Config{AllowPrivate: true, NoDelay: true},
		OnRecord: func(_ context.Context, r *pack.Record) error {
			u, _ := url.Parse(r.URL)
			mu.Lock()
			got = append(got, u.Path+" "+r.Title)
			mu.Unlock()
			return nil
		},
		StopWhenIdle: true,
		Progress:     -1,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	if err := eng.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	slices.Sort(got)
	for _, g := range got {
		fmt.Println(g)
	}
	// Output:
	// / Home
	// /a Alpha
	// /b Beta
}
