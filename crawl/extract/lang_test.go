package extract

import (
	"slices"
	"testing"
)

// shortPage is too short for the stop-word vote: no function words at all.
func shortPage(htmlAttrs string) []byte {
	return []byte(`<!DOCTYPE html><html` + htmlAttrs + `><head><title>Headers</title></head>
<body><p>Request headers, response headers</p></body></html>`)
}

func terms(p *Page) []string {
	var out []string
	for _, k := range p.Keywords {
		out = append(out, k.Term)
	}
	return out
}

// A page the vote cannot place is stemmed in the language it declares, else
// in the caller's fallback, so "headers" is indexed as "header" as on the
// pages around it; with neither, its words stay as they are.
func TestLanguageWhenVoteFails(t *testing.T) {
	for _, c := range []struct {
		name, attrs, fallback string
		lang                  string
		from                  LangSource
		term                  string
	}{
		{"declared", ` lang="en"`, "", "en", LangDeclared, "header"},
		{"declared region", ` class="js" LANG="EN-us"`, "", "en", LangDeclared, "header"},
		{"declared underscore", ` lang=" en_GB "`, "", "en", LangDeclared, "header"},
		{"declared beats fallback", ` lang="fr"`, "en", "fr", LangDeclared, "header"},
		{"Bokmål", ` lang="nb-NO"`, "", "no", LangDeclared, "head"},
		{"fallback", ``, "en", "en", LangFallback, "header"},
		{"fallback region", ``, "en-US", "en", LangFallback, "header"},
		{"none", ``, "", "", LangNone, "headers"},
		{"fallback unknown code", ``, "xx", "", LangNone, "headers"},
		{"declared unknown code, no fallback", ` lang="de"`, "", "", LangNone, "headers"},
		// the page says it is in a language we cannot stem: the site's
		// stemmer would mangle it and Lang would lie
		{"declared unknown code beats fallback", ` lang="de-DE"`, "en", "", LangNone, "headers"},
		// declarations that name no language leave the fallback its place
		{"undetermined", ` lang="und"`, "en", "en", LangFallback, "header"},
		{"malformed", ` lang="{{lang}}"`, "en", "en", LangFallback, "header"},
		{"empty", ` lang=""`, "en", "en", LangFallback, "header"},
	} {
		p := Extract(shortPage(c.attrs), nil, Options{FallbackLang: c.fallback})
		if p.Lang != c.lang || p.LangFrom != c.from || !slices.Contains(terms(p), c.term) {
			t.Errorf("%s: lang %q (%v), keywords %v; want %q (%v) with %q", c.name, p.Lang, p.LangFrom, terms(p), c.lang, c.from, c.term)
		}
	}
}

// The vote outweighs the declaration: a French page that a template labels
// English is stemmed as French ("mangeaient" → "mang"; English leaves it).
func TestDetectedLanguageOutweighsDeclared(t *testing.T) {
	fr := `<html lang="en"><body><p>Le chat est sur la table et il mange avec les enfants dans la maison.
Nous sommes très contents de vous voir. Les enfants mangeaient dans la cuisine.</p></body></html>`
	p := Extract([]byte(fr), nil, Options{FallbackLang: "en"})
	if p.Lang != "fr" || p.LangFrom != LangDetected || !slices.Contains(terms(p), "mang") {
		t.Fatalf("lang %q (%v), keywords %v; want fr detected with \"mang\"", p.Lang, p.LangFrom, terms(p))
	}
}

// The first lang attribute of <html> counts (a later <html> only adds
// attributes the first lacks); a page processed for its links has no language.
func TestDeclaredLanguageFirstAndLinksOnly(t *testing.T) {
	page := []byte(`<html lang="fr"><html lang="en"><title>t</title><p>chantaient</p>`)
	if p := Extract(page, nil, Options{}); p.Lang != "fr" || !slices.Contains(terms(p), "chant") {
		t.Errorf("lang %q, keywords %v; want the first declaration, fr", p.Lang, terms(p))
	}
	if p := Extract(page, nil, Options{LinksOnly: true, FallbackLang: "en"}); p.Lang != "" || p.LangFrom != LangNone {
		t.Errorf("links only: lang %q (%v)", p.Lang, p.LangFrom)
	}
}

func TestLanguageByTag(t *testing.T) {
	for tag, want := range map[string]struct {
		code  string
		named bool
	}{
		"en": {"en", true}, "EN-GB": {"en", true}, "Fr_ca": {"fr", true}, "\ten\n": {"en", true}, "no": {"no", true},
		"nb": {"no", true}, "de": {"", true}, "zh-Hant-TW": {"", true}, "ast": {"", true},
		"": {"", false}, "e": {"", false}, "engl": {"", false}, "und": {"", false}, "mul": {"", false},
		"x-klingon": {"", false}, "{{lang}}": {"", false}, "en1": {"", false}, "é": {"", false},
	} {
		l, named := languageByTag(tag)
		code := ""
		if l != nil {
			code = l.code
		}
		if code != want.code || named != want.named {
			t.Errorf("%q: %q named %v; want %q named %v", tag, code, named, want.code, want.named)
		}
	}
	b := []byte("en-US")
	if n := testing.AllocsPerRun(100, func() { languageByTag(b) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
