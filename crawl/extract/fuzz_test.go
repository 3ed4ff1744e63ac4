package extract

import (
	"net/url"
	"testing"
)

// FuzzExtract: a page body as any web server may send it (hostile
// inputs). Extraction must never panic and must keep its bounds: at most
// MaxKeywords keywords, MaxLinks links, MaxTitle bytes of title, links
// that parse as absolute http(s) URLs. `make fuzz` runs it briefly; the seeds are
// the committed corpus.
func FuzzExtract(f *testing.F) {
	for _, s := range []string{
		`<html lang="en"><head><title>Micra crawler</title><meta name="robots" content="noindex,nofollow"><base href="/b/"></head>` +
			`<body><h1>Headers</h1><p>crawlers crawl <a href="x?y=1#z">pages</a> <a href="//other.example/">o</a></p><script>var a="<a href=/no>"</script></body></html>`,
		`<a href="javascript:alert(1)">x</a><a href="http://[::1">bad</a><title>` + "\xff\xfe" + `</title>`,
		`<!-- unterminated`, `<textarea><a href="/in">`, ``,
	} {
		f.Add([]byte(s))
	}
	base, _ := url.Parse("http://192.0.2.1/dir/page.html")
	opt := Options{MaxKeywords: 8, MaxLinks: 4, MaxTitle: 16}
	f.Fuzz(func(t *testing.T, body []byte) {
		p := Extract(body, base, opt)
		if p == nil {
			t.Fatal("nil page")
		}
		if len(p.Keywords) > opt.MaxKeywords || len(p.Links) > opt.MaxLinks || len(p.Title) > opt.MaxTitle || p.LinkCount < len(p.Links) {
			t.Fatalf("bounds: %d keywords, %d links of %d, title of %d bytes", len(p.Keywords), len(p.Links), p.LinkCount, len(p.Title))
		}
		for _, l := range p.Links {
			u, err := url.Parse(l.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				t.Fatalf("link %q is not an absolute http(s) URL: %v", l.URL, err)
			}
		}
	})
}
