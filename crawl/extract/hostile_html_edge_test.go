package extract

import (
	"strings"
	"testing"
)

// A self-closing <script/> (or <style/>) still makes the tokenizer read the
// following text as raw script up to </script>, but startTag does not raise
// skipDepth for it: the script's identifiers become keywords.
func TestSelfClosingScriptTextNotIndexed(t *testing.T) {
	doc := `<html><head><title>Gardens</title><script src="a.js"/>analyticsBeacon(); analyticsBeacon(); analyticsBeacon();</script>` +
		`<style/>.navbarcolor{color:red}</style></head><body><p>roses and tulips</p></body></html>`
	p := Extract([]byte(doc), mustURL("http://ex.test/"), Options{KeepText: true})
	for _, k := range p.Keywords {
		if k.Term == "analyticsbeacon" || k.Term == "navbarcolor" {
			t.Errorf("script/style text indexed: keyword %+v (text %q)", k, p.Text)
		}
	}
}

// MaxTitle is documented as the number of title bytes kept (default 512),
// but a whole text token is appended whenever the title is still short.
func TestTitleBoundedByMaxTitle(t *testing.T) {
	doc := "<title>" + strings.Repeat("word ", 20000) + "</title><p>x</p>"
	p := Extract([]byte(doc), mustURL("http://ex.test/"), Options{})
	if len(p.Title) > 512 {
		t.Fatalf("title is %d bytes, MaxTitle default is 512", len(p.Title))
	}
}

// reset means to drop the buffers a huge page left behind, but it tests
// len(list) after list = x.termList[:0], which is always 0.
func TestPoolReleasesHugeBuffers(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 20000; i++ {
		b.WriteString("w")
		for n := i; n > 0; n /= 26 {
			b.WriteByte(byte('a' + n%26))
		}
		b.WriteByte(' ')
	}
	x := &extractor{termIdx: make(map[string]int32)}
	x.reset(&Page{}, Options{MaxKeywords: 40, MaxLinks: 1000, MaxTitle: 512})
	x.run([]byte(b.String()))
	x.breakWord()
	if len(x.termList) < 10000 {
		t.Fatalf("setup: only %d terms", len(x.termList))
	}
	x.reset(&Page{}, Options{MaxKeywords: 40, MaxLinks: 1000, MaxTitle: 512})
	if c := cap(x.termList); c > 4096 {
		t.Fatalf("after reset the pooled extractor still holds a %d-entry term list", c)
	}
}

// Block boundaries that browsers always render apart do not end a word:
// minified tables and definition lists glue neighbouring cells' words.
func TestBlockBoundariesSplitWords(t *testing.T) {
	doc := `<table><tr><th>Price</th><th>Quantity</th></tr></table><dl><dt>Colour</dt><dd>Purple</dd></dl><p>Alpha</p>Omega`
	p := Extract([]byte(doc), mustURL("http://ex.test/"), Options{KeepText: true})
	for _, k := range p.Keywords {
		if strings.Contains(k.Term, "pric") && strings.Contains(k.Term, "quantit") ||
			strings.Contains(k.Term, "alpha") && strings.Contains(k.Term, "omega") {
			t.Errorf("words of separate blocks glued into %q (keywords %v)", k.Term, p.Keywords)
		}
	}
}

// Fragment-only and non-http hrefs fill the MaxLinks budget before
// resolveLinks drops them, so real links after them are lost.
func TestMaxLinksNotSpentOnDroppedHrefs(t *testing.T) {
	doc := strings.Repeat(`<a href="#">top</a><a href="javascript:void(0)">x</a>`, 600) + `<a href="/real">real</a>`
	p := Extract([]byte(doc), mustURL("http://ex.test/"), Options{})
	if len(p.Links) != 1 {
		t.Fatalf("links %v, want the one real link (LinkCount %d)", p.Links, p.LinkCount)
	}
}
