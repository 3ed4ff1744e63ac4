package extract

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
)

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

const doc = `<!DOCTYPE html>
<html><head>
<title>  Crawling   Engines &amp; Crawlers </title>
<base href="http://example.test/docs/">
<style>body { color: red } .crawler { }</style>
<script>var crawling = "hidden words in script";</script>
<meta name="description" content="ignored">
</head>
<body>
<!-- a comment about crawling that must not count -->
<h1>Distributed crawling</h1>
<p>The crawler visits pages and extracts keywords. Crawlers are polite.</p>
<a href="a.html">relative to base</a>
<a href="/root.html#frag">root</a>
<a href="http://other.test/x" rel="external nofollow">nofollow</a>
<a href="javascript:alert(1)">js</a>
<a href="mailto:x@y.test">mail</a>
<a href="#top">fragment only</a>
<noscript>enable javascript please</noscript>
<p>Tokyo&nbsp;is a city. Another paragraph with the word engines.</p>
</body></html>`

func TestExtractBasics(t *testing.T) {
	p := Extract([]byte(doc), mustURL("http://example.test/index.html"), Options{KeepText: true})
	if p.Title != "Crawling Engines & Crawlers" {
		t.Errorf("title %q", p.Title)
	}
	for _, hidden := range []string{"hidden", "color", "comment", "javascript", "enable"} {
		if strings.Contains(p.Text, hidden) {
			t.Errorf("visible text contains %q: %q", hidden, p.Text)
		}
	}
	if !strings.Contains(p.Text, "Distributed crawling The crawler visits pages") {
		t.Errorf("visible text %q", p.Text)
	}
	want := []Link{
		{URL: "http://example.test/docs/a.html"},
		{URL: "http://example.test/root.html"},
		{URL: "http://other.test/x", NoFollow: true},
	}
	if fmt.Sprint(p.Links) != fmt.Sprint(want) {
		t.Errorf("links\n got %v\nwant %v", p.Links, want)
	}
	if p.LinkCount != 6 {
		t.Errorf("link count %d", p.LinkCount)
	}
	if p.Lang != "en" {
		t.Errorf("lang %q", p.Lang)
	}
	// "crawl" (title, h1, body; crawling/crawler/crawlers stem to crawl or crawler)
	// must rank first; stop-words are gone.
	if len(p.Keywords) == 0 || p.Keywords[0].Term != "crawl" {
		t.Fatalf("keywords %v", p.Keywords)
	}
	for _, k := range p.Keywords {
		switch k.Term {
		case "the", "and", "is", "a", "with":
			t.Errorf("stop-word %q kept", k.Term)
		case "hidden", "script", "comment", "enabl":
			t.Errorf("invisible word %q kept", k.Term)
		}
	}
	weight := map[string]uint32{}
	for _, k := range p.Keywords {
		weight[k.Term] = k.Weight
	}
	// Same frequency, but "engin" appears in the title: it must outrank "citi" (body only).
	if weight["engin"] <= weight["citi"] {
		t.Errorf("title word not weighted above body word: %v", p.Keywords)
	}
}

func TestMetaRobots(t *testing.T) {
	html := `<html><head><meta name="ROBOTS" content="NOINDEX, nofollow"><title>t</title></head>
<body><p>secret words here</p><a href="/next">next</a></body></html>`
	p := Extract([]byte(html), mustURL("https://h.test/p"), Options{})
	if !p.NoIndex || !p.NoFollow || len(p.Keywords) != 0 {
		t.Fatalf("noindex/nofollow not honoured: %+v", p)
	}
	if len(p.Links) != 1 || !p.Links[0].NoFollow {
		t.Fatalf("links %+v", p.Links)
	}
	p = Extract([]byte(`<meta name="robots" content="none"><a href="x">x</a>`), mustURL("https://h.test/"), Options{})
	if !p.NoIndex || !p.NoFollow {
		t.Fatal("robots none not honoured")
	}
}

func TestLanguageGuess(t *testing.T) {
	fr := `<p>Le chat est sur la table et il mange avec les enfants dans la maison. Nous sommes très contents de vous voir.</p>`
	es := `<p>El perro está en la casa y los niños juegan con el gato para que todos estén felices en el jardín.</p>`
	if p := Extract([]byte(fr), nil, Options{}); p.Lang != "fr" {
		t.Errorf("french guessed %q", p.Lang)
	}
	if p := Extract([]byte(es), nil, Options{}); p.Lang != "es" {
		t.Errorf("spanish guessed %q", p.Lang)
	}
	if p := Extract([]byte(`<p>zzq xxv</p>`), nil, Options{}); p.Lang != "" {
		t.Errorf("no evidence, guessed %q", p.Lang)
	}
}

func randomPage(r *rand.Rand, words []string, n int) string {
	var b strings.Builder
	b.WriteString("<html><head><title>")
	for range 6 {
		b.WriteString(words[r.IntN(len(words))] + " ")
	}
	b.WriteString("</title></head><body><h1>Heading</h1><p>")
	for i := range n {
		b.WriteString(words[r.IntN(len(words))])
		if i%17 == 16 {
			fmt.Fprintf(&b, ` <a href="/p/%d.html">link %d</a></p><p>`, r.IntN(1000), i)
		} else {
			b.WriteByte(' ')
		}
	}
	b.WriteString("</p></body></html>")
	return b.String()
}

func vocabulary(n int) []string {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]string, n)
	for i := range out {
		var w []byte
		for range 4 + r.IntN(6) {
			w = append(w, byte('a'+r.IntN(26)))
		}
		out[i] = string(w)
	}
	return out
}

func TestSimHashNearDuplicates(t *testing.T) {
	words := vocabulary(6000)
	r := rand.New(rand.NewPCG(3, 4))
	// Pages drawn from the same word distribution are near-duplicates to
	// SimHash, so the unrelated page gets a vocabulary of its own.
	base := randomPage(r, words[:3000], 1500)
	// A near-duplicate: one sentence changed at the end.
	near := strings.Replace(base, "</body>", "<p>an extra closing remark</p></body>", 1)
	other := randomPage(r, words[3000:], 1500)
	a := Extract([]byte(base), nil, Options{})
	b := Extract([]byte(near), nil, Options{})
	c := Extract([]byte(other), nil, Options{})
	if d := HammingDistance(a.SimHash, b.SimHash); d > 3 {
		t.Errorf("near-duplicate distance %d > 3", d)
	}
	if d := HammingDistance(a.SimHash, c.SimHash); d < 10 {
		t.Errorf("different pages only %d bits apart", d)
	}
	if a.ContentHash == b.ContentHash {
		t.Error("content hash equal for different bodies")
	}
}

func TestLinksOnly(t *testing.T) {
	p := Extract([]byte(doc), mustURL("http://example.test/index.html"), Options{LinksOnly: true})
	if p.Title != "Crawling Engines & Crawlers" || len(p.Links) != 3 || len(p.Keywords) != 0 || p.SimHash != 0 || p.TextBytes == 0 {
		t.Fatalf("links-only page %+v", p)
	}
}

func TestHostileInputDoesNotPanic(t *testing.T) {
	inputs := []string{
		"", "<", "<<<>>>", "<a href=", `<a href="http://[::1">x</a>`, "<title>unclosed",
		strings.Repeat("<div>", 100000), strings.Repeat("a", 1<<20), "\xff\xfe\x00bad utf8 <title>\xff</title>",
		"<script>" + strings.Repeat("x", 1<<16), `<base href="javascript:evil()"><a href="/x">x</a>`,
	}
	for _, in := range inputs {
		p := Extract([]byte(in), mustURL("http://h.test/"), Options{})
		for _, l := range p.Links {
			if !strings.HasPrefix(l.URL, "http://h.test/") {
				t.Errorf("input %.20q: unexpected link %q", in, l.URL)
			}
		}
	}
}

// benchPages are English-like pages: Zipf-distributed words, function words
// at the top ranks, inflected forms so the stemmer and stop-word lists do
// real work.
func benchPages() [][]byte {
	stops := strings.Fields("the of and to a in is that it for on was with as be by at this are from or an have not but")
	suffixes := []string{"", "s", "ing", "ed", "ation", "ly", "er"}
	vocab := append([]string(nil), stops...)
	for i, w := range vocabulary(20000) {
		vocab = append(vocab, w+suffixes[i%len(suffixes)])
	}
	r := rand.New(rand.NewPCG(5, 6))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(7, 8)), 1.1, 2, uint64(len(vocab)-1))
	pages := make([][]byte, 64)
	for i := range pages {
		words := make([]string, 3000)
		for j := range words {
			words[j] = vocab[zipf.Uint64()]
		}
		pages[i] = []byte(randomPage(r, words, 1300))
	}
	return pages
}

// BenchmarkExtract reports MB/s of HTML processed: tokenizing, text, links,
// keywords with stemming, SimHash and content hash, on ~10 KB pages. Its peer
// in the same run is BenchmarkPeerGoqueryDOM (what Colly's OnHTML does).
func BenchmarkExtract(b *testing.B) {
	pages := benchPages()
	u := mustURL("http://bench.test/dir/page.html")
	runThroughput(b, pages, func(p []byte) { Extract(p, u, Options{}) })
}

// BenchmarkExtractLinksOnly does the same work as the goquery peer (title,
// text, links; plus the content hash), streaming.
func BenchmarkExtractLinksOnly(b *testing.B) {
	pages := benchPages()
	u := mustURL("http://bench.test/dir/page.html")
	runThroughput(b, pages, func(p []byte) { Extract(p, u, Options{LinksOnly: true}) })
}

// BenchmarkPeerGoqueryDOM is the peer: building a goquery DOM and taking the
// title, the visible text and the links, without keywords, stemming or hashes.
func BenchmarkPeerGoqueryDOM(b *testing.B) {
	pages := benchPages()
	runThroughput(b, pages, func(p []byte) {
		doc, err := goquery.NewDocumentFromReader(bytes.NewReader(p))
		if err != nil {
			b.Fatal(err)
		}
		_ = doc.Find("title").Text()
		doc.Find("script,style").Remove()
		_ = doc.Find("body").Text()
		doc.Find("a[href]").Each(func(_ int, s *goquery.Selection) { s.Attr("href") })
	})
}

func runThroughput(b *testing.B, pages [][]byte, fn func([]byte)) {
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	var n int64
	for i := 0; i < b.N; i++ {
		p := pages[i%len(pages)]
		fn(p)
		n += int64(len(p))
	}
	b.SetBytes(n / int64(b.N))
	// On a shared machine wall-clock MB/s understates the work rate; MB per
	// CPU-second (user+system time of this process) is the figure to compare.
	if cpu := (cpuTime() - cpu0).Seconds(); cpu > 0 {
		b.ReportMetric(float64(n)/1e6/cpu, "MB/cpu-s")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
