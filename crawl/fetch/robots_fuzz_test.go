package fetch

import "testing"

// FuzzRobotsAllowed: a robots.txt as any server may send it, matched for
// any URL (hostile inputs). Google's matcher (the grobotstxt
// port) panics on some paths; robotsAllowed must turn that into a refusal,
// never crash the crawler. `make fuzz` runs it briefly; the seeds are the
// committed corpus.
func FuzzRobotsAllowed(f *testing.F) {
	f.Add("User-agent: *\nDisallow: /private\nAllow: /private/ok\nCrawl-delay: 2\n", "http://192.0.2.1/private/x")
	f.Add("user-agent: micra\ndisallow: /\n", "http://192.0.2.1/")
	f.Add("User-agent: *\nDisallow: /*.pdf$\n", "relative/path")
	f.Add("\xff\xfe\x00garbage", "")
	f.Fuzz(func(t *testing.T, body, rawURL string) {
		_ = robotsAllowed(body, "micra", rawURL)
	})
}
