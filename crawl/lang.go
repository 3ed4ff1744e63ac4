package crawl

import "sync"

// langHints learns the dominant language of each host, and of the whole
// crawl, from the pages that told their own (detected or declared; never a
// fallback, or a guess would reinforce itself). A page too short to tell
// is then stemmed in its site's language (extract.Options.FallbackLang),
// and one word is not indexed two ways ("headers" beside "header"). The
// zero value is ready to use.
type langHints struct {
	mu    sync.Mutex
	max   int // hosts remembered (0: maxLangHosts)
	hosts map[string]langCounts
	all   langCounts
}

const maxLangHosts = 100_000

// langCounts is the pages per language: a host has one or two languages, a
// crawl a handful, so a slice searched in order is smaller than a map.
type langCounts []langCount

type langCount struct {
	lang  string
	pages int
}

// observe counts a page of host in lang.
func (h *langHints) observe(host, lang string) {
	if lang == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.hosts[host]
	if !ok {
		if h.max <= 0 {
			h.max = maxLangHosts
		}
		if h.hosts == nil || len(h.hosts) >= h.max {
			h.hosts = make(map[string]langCounts) // bounded: start over rather than grow
		}
	}
	h.hosts[host] = c.add(lang)
	h.all = h.all.add(lang)
}

// fallback is the language to stem host's pages in when they do not tell
// their own: the host's once at least 2 of its pages did and most of them
// agree, else the crawl's once at least 10 pages did and most agree, else "".
func (h *langHints) fallback(host string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.hosts[host].majority(2); l != "" {
		return l
	}
	return h.all.majority(10)
}

func (c langCounts) add(lang string) langCounts {
	for i := range c {
		if c[i].lang == lang {
			c[i].pages++
			return c
		}
	}
	return append(c, langCount{lang, 1})
}

// majority is the language of more than half of the pages, once there are
// at least least of them.
func (c langCounts) majority(least int) string {
	total, top := 0, langCount{}
	for _, lc := range c {
		total += lc.pages
		if lc.pages > top.pages {
			top = lc
		}
	}
	if total < least || 2*top.pages <= total {
		return ""
	}
	return top.lang
}
