package extract

import (
	"strings"
	"sync"

	"github.com/kljensen/snowball/english"
	"github.com/kljensen/snowball/french"
	"github.com/kljensen/snowball/hungarian"
	"github.com/kljensen/snowball/norwegian"
	"github.com/kljensen/snowball/russian"
	"github.com/kljensen/snowball/spanish"
	"github.com/kljensen/snowball/swedish"
)

// language is one language the Snowball stemmers cover: its stop-word list
// doubles as the cheap language detector (the language whose function words
// occur most often among the first words wins).
type language struct {
	code   string
	isStop func(string) bool
	stem   func(string) string
	cache  *stemCache
}

var languages = [...]language{
	{"en", english.IsStopWord, func(w string) string { return english.Stem(w, false) }, new(stemCache)},
	{"fr", french.IsStopWord, func(w string) string { return french.Stem(w, false) }, new(stemCache)},
	{"es", spanish.IsStopWord, func(w string) string { return spanish.Stem(w, false) }, new(stemCache)},
	{"ru", russian.IsStopWord, func(w string) string { return russian.Stem(w, false) }, new(stemCache)},
	{"sv", swedish.IsStopWord, func(w string) string { return swedish.Stem(w, false) }, new(stemCache)},
	{"no", norwegian.IsStopWord, func(w string) string { return norwegian.Stem(w, false) }, new(stemCache)},
	{"hu", hungarian.IsStopWord, func(w string) string { return hungarian.Stem(w, false) }, new(stemCache)},
}

var englishLang = &languages[0]

// LangSource tells how Page.Lang was chosen. Only a page's own language,
// detected or declared, says anything about its site: a fallback is the
// caller's guess coming back.
type LangSource uint8

const (
	LangNone     LangSource = iota // no language: words are kept unstemmed
	LangDetected                   // the stop-word vote
	LangDeclared                   // <html lang>, the vote being inconclusive
	LangFallback                   // Options.FallbackLang
)

func (s LangSource) String() string {
	switch s {
	case LangDetected:
		return "detected"
	case LangDeclared:
		return "declared"
	case LangFallback:
		return "fallback"
	}
	return "none"
}

// languageByTag returns the language we stem that the primary subtag of a
// BCP 47 tag names, case-insensitively ("en-US", "EN" → en; "nb" → no).
// named reports whether the tag names a language at all (two or three
// letters, not "und" or "mul"): an empty or malformed one, a template's
// "{{lang}}", declares nothing. It allocates nothing: it runs on every page.
func languageByTag[T string | []byte](tag T) (l *language, named bool) {
	i := 0
	for i < len(tag) && asciiSpace(tag[i]) {
		i++
	}
	var b [3]byte
	n := 0
	for ; i < len(tag); i++ {
		c := tag[i]
		if c == '-' || c == '_' || asciiSpace(c) {
			break
		}
		if c |= 0x20; c < 'a' || c > 'z' || n == len(b) { // (| 0x20 lower-cases an ASCII letter)
			return nil, false
		}
		b[n] = c
		n++
	}
	if n < 2 {
		return nil, false
	}
	code := b[:n]
	switch string(code) {
	case "und", "mul": // undetermined, several
		return nil, false
	case "nb": // Bokmål, the Norwegian of the Snowball stemmer
		code = append(code[:0], "no"...)
	}
	for i := range languages {
		if languages[i].code == string(code) {
			return &languages[i], true
		}
	}
	return nil, true
}

func asciiSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }

// guessLanguage picks the language whose stop-words occur most often. Only
// repeated words vote on longer pages: function words are the most frequent
// words of any text, and the vote then costs a few hundred lookups per page.
func (x *extractor) guessLanguage() *language {
	var stops [len(languages)]uint32
	minCount := uint32(1)
	if x.page.Words >= 200 {
		minCount = 2
	}
	for i, w := range x.termList {
		c := x.termCount[i]
		if c < minCount || len(w) > 24 {
			continue
		}
		for l := range languages {
			if languages[l].isStop(w) {
				stops[l] += c
			}
		}
	}
	best, hits := -1, uint32(0)
	for i, n := range stops {
		if n > hits {
			best, hits = i, n
		}
	}
	if best < 0 || hits < 3 || int(hits)*20 < x.page.Words {
		return nil
	}
	return &languages[best]
}

// Snowball stemming costs microseconds per word while web vocabulary is
// Zipfian, so a bounded cache of recent stems pays for itself many times.
const stemCacheShards, stemCacheShardCap = 16, 8192

type stemCache struct {
	shards [stemCacheShards]struct {
		sync.RWMutex
		m map[string]string
	}
}

func (l *language) cachedStem(w string) string {
	var h uint32 = 2166136261
	for i := 0; i < len(w); i++ {
		h = (h ^ uint32(w[i])) * 16777619
	}
	s := &l.cache.shards[h%stemCacheShards]
	s.RLock()
	if st, ok := s.m[w]; ok {
		s.RUnlock()
		return st
	}
	s.RUnlock()
	st := l.stem(w)
	s.Lock()
	switch {
	case s.m == nil: // grown as words arrive: most languages see few pages
		s.m = map[string]string{}
	case len(s.m) >= stemCacheShardCap:
		s.m = make(map[string]string, stemCacheShardCap/4) // bounded: start over rather than grow
	}
	s.m[w] = st
	s.Unlock()
	return st
}

// Stem returns word, lower-cased, stemmed as the crawler stems the
// keywords of a page in lang (an ISO 639-1 code; "" or a language without
// a stemmer: English), so a search query matches the keywords records
// carry.
func Stem(lang, word string) string {
	w := strings.ToLower(word)
	l := englishLang
	for i := range languages {
		if languages[i].code == lang {
			l = &languages[i]
		}
	}
	return l.cachedStem(w)
}
