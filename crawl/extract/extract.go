// Package extract owns on-site processing of fetched HTML, as UCYMicra did at
// the host: a single streaming pass with the golang.org/x/net/html tokenizer
// (no DOM) yields the title, the visible text (scripts, styles and comments
// dropped), the links (resolved against <base>, rel=nofollow and meta robots
// honoured), the page's language (a cheap stop-word vote, else the language
// <html lang> declares, else one the caller supplies), a content hash, a
// SimHash near-duplicate fingerprint and the page's keywords ranked by
// frequency and position, stemmed with the Snowball stemmers and with
// stop-words removed.
package extract

import (
	"bytes"
	"crypto/sha256"
	"net/url"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/micra-crawler/micra/crawl/pack"
	"golang.org/x/net/html"

	"github.com/micra-crawler/micra/crawl/urlnorm"
)

// Options bound the work and the output of Extract. Zero values take defaults.
type Options struct {
	MaxKeywords int  // keywords kept per page (default 40)
	MaxLinks    int  // links kept per page (default 1000); the rest are counted, not kept
	MaxTitle    int  // title bytes kept (default 512)
	KeepText    bool // keep the visible text in Page.Text (tests, file crawls that want it)
	// LinksOnly skips the word work: no keywords, language or SimHash, only
	// title, text size, links and content hash (link discovery, noindex pages).
	LinksOnly bool
	// FallbackLang is the language code ("en") a page is stemmed in when
	// the stop-word vote cannot tell its language and <html lang> declares
	// none: the site's, say, so that a short page indexes "headers" as its
	// neighbours do. A page declaring a language we do not stem stays
	// unstemmed; a code we do not stem is ignored.
	FallbackLang string
}

func (o *Options) defaults() {
	if o.MaxKeywords <= 0 {
		o.MaxKeywords = 40
	}
	if o.MaxLinks <= 0 {
		o.MaxLinks = 1000
	}
	if o.MaxTitle <= 0 {
		o.MaxTitle = 512
	}
}

// Link is one outgoing link, resolved to an absolute http(s) URL without fragment.
type Link struct {
	URL      string
	NoFollow bool // rel=nofollow on the anchor, or meta robots nofollow on the page
}

// Page is what one HTML document reduces to.
type Page struct {
	Title       string
	Text        string // visible text, only with Options.KeepText
	TextBytes   int
	Links       []Link
	LinkCount   int        // all links seen, including those beyond MaxLinks
	Lang        string     // the language the keywords are stemmed in, "" for none
	LangFrom    LangSource // how Lang was chosen
	ContentHash [16]byte
	SimHash     uint64
	Keywords    []pack.Keyword
	Words       int  // indexable words seen (before stop-word removal)
	NoIndex     bool // meta robots noindex: Keywords is empty
	NoFollow    bool // meta robots nofollow: every link is marked NoFollow
	Base        *url.URL
}

// Where a word occurs decides its weight: a word in the title counts as much
// as several in the body, the opening of the body more than its tail.
const (
	weightBody     = 1
	weightLead     = 2 // the first leadWords words of the body
	weightHeading  = 3 // h2–h6
	weightH1       = 4
	weightTitle    = 6
	leadWords      = 100
	maxWordRunes   = 40
	maxTermsPerDoc = 50_000 // distinct raw words tracked per page, against hostile pages
)

// ContentHash is the truncated SHA-256 used for exact change detection.
func ContentHash(body []byte) [16]byte {
	sum := sha256.Sum256(body)
	var h [16]byte
	copy(h[:], sum[:16])
	return h
}

// Extract processes one HTML document fetched from pageURL.
func Extract(body []byte, pageURL *url.URL, opt Options) *Page {
	opt.defaults()
	p := &Page{ContentHash: ContentHash(body), Base: pageURL}
	x := extractorPool.Get().(*extractor)
	x.reset(p, opt)
	x.run(body)
	x.finish(pageURL)
	x.page = nil
	extractorPool.Put(x)
	return p
}

type extractor struct {
	page *Page
	opt  Options

	skipDepth    int // inside script/style/template/noscript/svg…: text is not visible
	titleDepth   int
	h1Depth      int
	headingDepth int
	seenTitle    bool

	title  []byte
	text   bytes.Buffer
	lastWS bool
	word   []byte
	// Distinct lower-cased words of the page: one map lookup per word, the
	// weights and occurrence counts in parallel slices.
	termIdx   map[string]int32
	termList  []string
	termW     []uint32
	termCount []uint32
	wordAlpha bool // the word being assembled has a letter
	wordRunes int
	hrefs     []rawLink
	baseHref  string
	bodyWord  int

	pendingWeight int    // weight of the word being assembled in word
	nameBuf       []byte // current tag name, lower-cased

	// The first lang attribute of <html> counts, as in HTML parsing.
	langSeen      bool
	declared      *language // the language it names, if we stem it
	declaredOther bool      // it names one we do not stem
}

var extractorPool = sync.Pool{New: func() any {
	return &extractor{termIdx: make(map[string]int32, 512)}
}}

// reset prepares a pooled extractor for a new page, keeping its buffers.
func (x *extractor) reset(p *Page, opt Options) {
	idx, list, w, c, word := x.termIdx, x.termList[:0], x.termW[:0], x.termCount[:0], x.word[:0]
	if cap(list) > 4096 || len(idx) > 4096 { // a huge page left huge buffers: let them go
		idx, list, w, c = make(map[string]int32, 512), nil, nil, nil
	} else {
		clear(idx)
	}
	*x = extractor{page: p, opt: opt, termIdx: idx, termList: list, termW: w, termCount: c, word: word, nameBuf: x.nameBuf[:0]}
}

type rawLink struct {
	href     string
	nofollow bool
}

func (x *extractor) run(body []byte) {
	z := html.NewTokenizer(bytes.NewReader(body))
	z.SetMaxBuf(0)
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return
		case html.TextToken:
			x.textToken(z.Text())
		case html.StartTagToken, html.SelfClosingTagToken:
			name := x.tagName(z.Raw(), 1)
			x.startTag(z, name, true, tt == html.SelfClosingTagToken)
		case html.EndTagToken:
			x.endTag(x.tagName(z.Raw(), 2))
		}
	}
}

// tagName reads the lower-cased tag name from the raw tag text after skip
// bytes ("<" or "</"). Tokenizer.TagName would copy it for every tag.
func (x *extractor) tagName(raw []byte, skip int) []byte {
	if len(raw) <= skip {
		return nil
	}
	raw = raw[skip:]
	n := 0
	for n < len(raw) {
		c := raw[n]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '/' || c == '>' {
			break
		}
		n++
	}
	x.nameBuf = append(x.nameBuf[:0], raw[:n]...)
	for i, c := range x.nameBuf {
		if 'A' <= c && c <= 'Z' {
			x.nameBuf[i] = c + 'a' - 'A'
		}
	}
	return x.nameBuf
}

func isSkipTag(name []byte) bool {
	switch string(name) {
	case "script", "style", "template", "noscript", "svg", "math", "iframe", "object", "select", "textarea":
		return true
	}
	return false
}

// isRawText: the skipped tags whose content the tokenizer reads as raw text
// even when the start tag is written self-closing.
func isRawText(name []byte) bool {
	switch string(name) {
	case "script", "style", "noscript", "iframe", "textarea":
		return true
	}
	return false
}

// isBlockTag: tags whose start or end separates words (minified HTML puts
// no space between blocks).
func isBlockTag(name []byte) bool {
	switch string(name) {
	case "br", "p", "div", "li", "td", "tr", "th", "dt", "dd", "hr", "table", "ul", "ol", "dl",
		"section", "article", "nav", "header", "footer", "aside", "main", "blockquote", "pre",
		"address", "figure", "figcaption", "caption", "form", "fieldset", "legend", "option", "button", "label":
		return true
	}
	return false
}

func headingLevel(name []byte) int {
	if len(name) == 2 && (name[0] == 'h' || name[0] == 'H') && name[1] >= '1' && name[1] <= '6' {
		return int(name[1] - '0')
	}
	return 0
}

func (x *extractor) startTag(z *html.Tokenizer, name []byte, hasAttr, selfClosing bool) {
	switch {
	case isSkipTag(name):
		if string(name) == "iframe" && hasAttr {
			x.linkAttrs(z, "src")
		}
		if !selfClosing || isRawText(name) {
			// (the tokenizer reads <script/> as raw text up to </script>
			// all the same: its text is no more the page's)
			x.skipDepth++
		}
		return
	case string(name) == "title":
		if !x.seenTitle { // (<title/> too: raw text up to </title>)
			x.titleDepth++
		}
		return
	case string(name) == "a" || string(name) == "area":
		if hasAttr {
			x.linkAttrs(z, "href")
		}
	case string(name) == "frame":
		if hasAttr {
			x.linkAttrs(z, "src")
		}
	case string(name) == "base":
		if hasAttr && x.baseHref == "" {
			for {
				k, v, more := z.TagAttr()
				if string(k) == "href" {
					x.baseHref = strings.TrimSpace(string(v))
				}
				if !more {
					break
				}
			}
		}
	case string(name) == "meta":
		if hasAttr {
			x.meta(z)
		}
	case string(name) == "html":
		if hasAttr && !x.langSeen {
			x.htmlLang(z)
		}
	case isBlockTag(name):
		x.breakWord()
		x.space()
	}
	if selfClosing {
		return
	}
	if lvl := headingLevel(name); lvl == 1 {
		x.breakWord()
		x.h1Depth++
	} else if lvl > 1 {
		x.breakWord()
		x.headingDepth++
	}
}

func (x *extractor) endTag(name []byte) {
	switch {
	case isSkipTag(name):
		if x.skipDepth > 0 {
			x.skipDepth--
		}
	case string(name) == "title":
		if x.titleDepth > 0 {
			x.breakWord()
			x.titleDepth = 0
			x.seenTitle = true
		}
	default:
		if lvl := headingLevel(name); lvl == 1 && x.h1Depth > 0 {
			x.breakWord()
			x.h1Depth--
		} else if lvl > 1 && x.headingDepth > 0 {
			x.breakWord()
			x.headingDepth--
		} else if lvl > 0 {
			x.breakWord()
		} else if isBlockTag(name) {
			// </p>X: a block's end ends its last word too
			x.breakWord()
			x.space()
		}
	}
}

func (x *extractor) linkAttrs(z *html.Tokenizer, attr string) {
	var href string
	var nofollow, found bool
	for {
		k, v, more := z.TagAttr()
		switch string(k) {
		case attr:
			href, found = string(v), true
		case "rel":
			for _, f := range strings.Fields(strings.ToLower(string(v))) {
				if f == "nofollow" {
					nofollow = true
				}
			}
		}
		if !more {
			break
		}
	}
	if !found {
		return
	}
	x.page.LinkCount++
	if !followable(href) {
		return // (dropped later anyway: it must not take a real link's place)
	}
	if len(x.hrefs) < x.opt.MaxLinks {
		x.hrefs = append(x.hrefs, rawLink{href: href, nofollow: nofollow})
	}
}

func (x *extractor) meta(z *html.Tokenizer) {
	var name, content string
	for {
		k, v, more := z.TagAttr()
		switch string(k) {
		case "name":
			name = strings.ToLower(strings.TrimSpace(string(v)))
		case "content":
			content = strings.ToLower(string(v))
		}
		if !more {
			break
		}
	}
	// "robots" speaks to every crawler; "micra" to ours alone.
	if name != "robots" && name != "micra" {
		return
	}
	for _, f := range strings.FieldsFunc(content, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		switch f {
		case "noindex":
			x.page.NoIndex = true
		case "nofollow":
			x.page.NoFollow = true
		case "none":
			x.page.NoIndex, x.page.NoFollow = true, true
		}
	}
}

func (x *extractor) htmlLang(z *html.Tokenizer) {
	for {
		k, v, more := z.TagAttr()
		if string(k) == "lang" {
			x.langSeen = true
			l, named := languageByTag(v)
			x.declared, x.declaredOther = l, named && l == nil
			return
		}
		if !more {
			return
		}
	}
}

func (x *extractor) textToken(t []byte) {
	if x.skipDepth > 0 {
		return
	}
	if x.titleDepth > 0 {
		if room := x.opt.MaxTitle - len(x.title); room > 0 {
			x.title = append(x.title, t[:min(len(t), room)]...)
		}
		if !x.opt.LinksOnly {
			x.words(t, weightTitle)
		}
		return
	}
	x.page.TextBytes += len(t)
	if x.opt.KeepText {
		x.visible(t)
	}
	w := weightBody
	switch {
	case x.h1Depth > 0:
		w = weightH1
	case x.headingDepth > 0:
		w = weightHeading
	}
	if !x.opt.LinksOnly {
		x.words(t, w)
	}
}

// visible appends text with whitespace runs collapsed to one space.
func (x *extractor) visible(t []byte) {
	for _, r := range string(t) {
		if unicode.IsSpace(r) {
			x.space()
			continue
		}
		x.text.WriteRune(r)
		x.lastWS = false
	}
}

func (x *extractor) space() {
	if x.opt.KeepText && !x.lastWS && x.text.Len() > 0 {
		x.text.WriteByte(' ')
		x.lastWS = true
	}
}

// words splits text into lower-cased words and adds them with weight w.
// A word may continue across text tokens (entities split text), so the
// current word is carried in x.word until a separator or a structural break.
func (x *extractor) words(t []byte, w int) {
	for i := 0; i < len(t); {
		c := t[i]
		switch asciiClass[c] {
		case clsLower, clsDigit:
			// Take the whole run of lower-case letters and digits at once.
			j := i + 1
			for j < len(t) && (asciiClass[t[j]] == clsLower || asciiClass[t[j]] == clsDigit) {
				j++
			}
			run := t[i:j]
			x.word = append(x.word, run...)
			x.wordRunes += len(run)
			if !x.wordAlpha {
				for _, c := range run {
					if asciiClass[c] == clsLower {
						x.wordAlpha = true
						break
					}
				}
			}
			i = j
		case clsUpper:
			x.word = append(x.word, c+'a'-'A')
			x.wordAlpha = true
			x.wordRunes++
			i++
		case clsApos:
			if len(x.word) > 0 {
				// keep apostrophes inside words ("don't"); trailing ones are trimmed in addWord
				x.word = append(x.word, c)
			} else {
				x.addWord(w)
			}
			i++
		case clsSep:
			if len(x.word) > 0 {
				x.addWord(w)
			}
			i++
		default: // non-ASCII
			r, n := utf8.DecodeRune(t[i:])
			i += n
			if unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) {
				x.word = utf8.AppendRune(x.word, unicode.ToLower(r))
				x.wordAlpha = x.wordAlpha || !unicode.IsDigit(r)
				x.wordRunes++
			} else if r == '’' && len(x.word) > 0 {
				x.word = append(x.word, '\'')
			} else {
				x.addWord(w)
			}
		}
	}
	x.pendingWeight = w
}

const (
	clsSep = iota
	clsLower
	clsDigit
	clsUpper
	clsApos
	clsNonASCII
)

var asciiClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		switch {
		case c >= utf8.RuneSelf:
			t[c] = clsNonASCII
		case 'a' <= c && c <= 'z':
			t[c] = clsLower
		case '0' <= c && c <= '9':
			t[c] = clsDigit
		case 'A' <= c && c <= 'Z':
			t[c] = clsUpper
		case c == '\'':
			t[c] = clsApos
		}
	}
	return t
}()

func (x *extractor) breakWord() { x.addWord(x.pendingWeight) }

func (x *extractor) addWord(w int) {
	word := bytes.TrimRight(x.word, "'")
	alpha, runes := x.wordAlpha, x.wordRunes
	x.word, x.wordAlpha, x.wordRunes = x.word[:0], false, 0
	if len(word) < 2 || runes > maxWordRunes || !alpha {
		return
	}
	if w == weightBody {
		x.bodyWord++
		if x.bodyWord <= leadWords {
			w = weightLead
		}
	}
	x.page.Words++
	if i, ok := x.termIdx[string(word)]; ok { // no allocation on a hit
		x.termW[i] += uint32(w)
		x.termCount[i]++
		return
	}
	if len(x.termList) >= maxTermsPerDoc {
		return
	}
	ws := string(word)
	x.termIdx[ws] = int32(len(x.termList))
	x.termList = append(x.termList, ws)
	x.termW = append(x.termW, uint32(w))
	x.termCount = append(x.termCount, 1)
}

func hasLetter(b []byte) bool {
	for _, c := range b {
		if c >= 'a' && c <= 'z' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

func (x *extractor) finish(pageURL *url.URL) {
	x.breakWord()
	p := x.page
	p.Title = collapseSpace(string(x.title))
	if x.opt.KeepText {
		p.Text = strings.TrimSpace(x.text.String())
	}
	if x.baseHref != "" && pageURL != nil {
		if b, err := pageURL.Parse(x.baseHref); err == nil && (b.Scheme == "http" || b.Scheme == "https" || b.Scheme == "file") {
			p.Base = b
		}
	}
	p.Links = resolveLinks(p.Base, x.hrefs, p.NoFollow)
	if x.opt.LinksOnly {
		return
	}

	lang, from := x.guessLanguage(), LangDetected
	switch {
	case lang != nil: // what the page says outweighs what it claims
	case x.declared != nil:
		lang, from = x.declared, LangDeclared
	case x.declaredOther:
		// a page in a language we cannot stem: its site's stemmer would be
		// wrong, and so would Lang
	default:
		lang, _ = languageByTag(x.opt.FallbackLang)
		from = LangFallback
	}
	if lang != nil {
		p.Lang, p.LangFrom = lang.code, from
	}
	stemmed := make(map[string]uint32, len(x.termList))
	for i, w := range x.termList {
		weight := x.termW[i]
		t := w
		if lang != nil {
			if lang.isStop(w) {
				continue
			}
			t = lang.cachedStem(w)
		} else if englishLang.isStop(w) {
			// Unknown language: still drop the commonest English function words.
			continue
		}
		stemmed[t] += weight
	}
	p.SimHash = simHash(stemmed)
	if p.NoIndex {
		return
	}
	p.Keywords = topKeywords(stemmed, x.opt.MaxKeywords)
}

// topKeywords returns the k heaviest terms, heaviest first, ties by term:
// a bounded min-heap keeps it O(n log k) on pages with many distinct words.
func topKeywords(terms map[string]uint32, k int) []pack.Keyword {
	less := func(a, b pack.Keyword) bool { // a ranks below b
		if a.Weight != b.Weight {
			return a.Weight < b.Weight
		}
		return a.Term > b.Term
	}
	h := make([]pack.Keyword, 0, min(k, len(terms)))
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			m := l
			if r := l + 1; r < len(h) && less(h[r], h[l]) {
				m = r
			}
			if !less(h[m], h[i]) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for t, w := range terms {
		kw := pack.Keyword{Term: t, Weight: w}
		if len(h) < k {
			h = append(h, kw)
			for i := len(h) - 1; i > 0; {
				p := (i - 1) / 2
				if !less(h[i], h[p]) {
					break
				}
				h[i], h[p] = h[p], h[i]
				i = p
			}
		} else if less(h[0], kw) {
			h[0] = kw
			down(0)
		}
	}
	sort.Slice(h, func(i, j int) bool { return less(h[j], h[i]) })
	return h
}

func resolveLinks(base *url.URL, hrefs []rawLink, pageNoFollow bool) []Link {
	out := make([]Link, 0, len(hrefs))
	for _, h := range hrefs {
		href := strings.TrimSpace(h.href)
		if href == "" || href[0] == '#' {
			continue
		}
		u, err := url.Parse(href)
		if err == nil {
			urlnorm.KeepRawPath(u) // an escaped "/" must survive resolution and String
			if base != nil {
				u = base.ResolveReference(u)
			}
		}
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			continue
		}
		u.Fragment, u.RawFragment = "", ""
		out = append(out, Link{URL: u.String(), NoFollow: h.nofollow || pageNoFollow})
	}
	return out
}

func collapseSpace(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "")
	}
	return s
}

// followable reports whether href may lead to an http(s) page: not empty,
// not a fragment of this page, and with no scheme or an http(s) one.
func followable(href string) bool {
	href = strings.TrimSpace(href)
	if href == "" || href[0] == '#' {
		return false
	}
	if i := strings.IndexAny(href, ":/?#"); i > 0 && href[i] == ':' {
		scheme := strings.ToLower(href[:i])
		return scheme == "http" || scheme == "https"
	}
	return true
}
