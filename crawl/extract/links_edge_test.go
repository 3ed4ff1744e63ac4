package extract

import "testing"

// An escaped "/" in a link whose path also holds a character Go escapes
// (a space, "|", raw UTF-8) must survive resolution: base.Parse(href).String()
// turned /a%2Fb/c d into /a/b/c%20d, another resource.
func TestLinkKeepsEscapedSlash(t *testing.T) {
	html := `<a href="a%2Fb/c d">x</a><a href="/q%2Fr/caf` + "\u00e9" + `">y</a>`
	p := Extract([]byte(html), mustURL("http://ex.com/dir/"), Options{})
	want := []string{"http://ex.com/dir/a%2Fb/c%20d", "http://ex.com/q%2Fr/caf%C3%A9"}
	if len(p.Links) != len(want) {
		t.Fatalf("links %+v, want %v", p.Links, want)
	}
	for i, w := range want {
		if p.Links[i].URL != w {
			t.Errorf("link %d: %s, want %s", i, p.Links[i].URL, w)
		}
	}
}
