package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/micra-crawler/micra/node"
)

// isolateSettings keeps the developer's ~/.micra and MICRA_<KEY> variables
// out of the tests (and of the processes they start): MICRA_HOME is a home
// whose config.toml sets nothing. It returns the cleanup.
func isolateSettings() func() {
	for _, s := range node.Settings {
		os.Unsetenv(s.Env())
	}
	home, err := os.MkdirTemp("", "micra-test-home-")
	if err != nil {
		panic(err)
	}
	os.WriteFile(filepath.Join(home, configName), []byte("# the tests' nodes are configured by their flags\n"), 0o600)
	os.Setenv(homeEnv, home)
	return func() { os.RemoveAll(home) }
}

// values is a setting's example as the text a flag or variable takes; a
// path made absolute in dir (the three sources resolve relative paths
// differently, on purpose).
func values(t *testing.T, s node.Setting, dir string) []string {
	t.Helper()
	v, err := s.Values(s.Example)
	if err != nil {
		t.Fatal(err)
	}
	if s.Type == "path" {
		v[0] = filepath.Join(dir, v[0])
	}
	return v
}

func tomlLine(key string, vals []string, list bool) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = `"` + v + `"`
	}
	switch {
	case list:
		return key + " = [" + strings.Join(q, ", ") + "]\n"
	case regexp.MustCompile(`^(true|false|[0-9]+)$`).MatchString(vals[0]):
		return key + " = " + vals[0] + "\n"
	}
	return key + " = " + q[0] + "\n"
}

// settingsOf parses args as micra node's setting flags.
func settingsOf(t *testing.T, args ...string) *settingFlags {
	t.Helper()
	fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sf := addSettingFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return sf
}

func configOf(t *testing.T, config string, sf *settingFlags) node.Config {
	t.Helper()
	f, err := loadSettings(config, "", sf, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	c.Overlay.ProbeGuard = nil // a function: not comparable
	return c
}

// Every setting gives the same Config from the file, the environment and
// its flag, and a Config other than the defaults'.
func TestSettingsFromEverySource(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "seeds.txt"), []byte("https://example.com/\n"), 0o644)
	empty := filepath.Join(dir, "empty.toml")
	os.WriteFile(empty, nil, 0o644)
	base := configOf(t, empty, nil)
	for _, s := range node.Settings {
		t.Run(s.Key, func(t *testing.T) {
			vals := values(t, s, dir)
			file := filepath.Join(dir, s.Key+".toml")
			os.WriteFile(file, []byte(tomlLine(s.Key, vals, s.Type == "list")), 0o644)
			fromFile := configOf(t, file, nil)

			t.Setenv(s.Env(), strings.Join(vals, ","))
			fromEnv := configOf(t, empty, nil)
			os.Unsetenv(s.Env())

			var args []string
			for _, v := range vals {
				args = append(args, "--"+s.Flag()+"="+v)
			}
			fromFlags := configOf(t, empty, settingsOf(t, args...))

			if reflect.DeepEqual(fromFile, base) {
				t.Errorf("%s = %q changes nothing", s.Key, vals)
			}
			if !reflect.DeepEqual(fromFile, fromEnv) || !reflect.DeepEqual(fromFile, fromFlags) {
				t.Errorf("%s = %q: the file, %s and %q give different Configs:\n%+v\n%+v\n%+v", s.Key, vals, s.Env(), args, fromFile, fromEnv, fromFlags)
			}
		})
	}
}

// defaults < file < environment < flags; a flag's false and a variable's
// list replace the file's.
func TestSettingsPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.toml")
	os.WriteFile(file, []byte(`data_dir = "d"
concurrency = 2
min_delay = "3s"
per_ip = 3
monitor = true
bootstrap = ["/ip4/127.0.0.1/tcp/1/p2p/12D3KooWJ6MqnVtvqV7b5bWxqbtqYuxMNwfrfNJXZ4F5bBAVLk1N"]
`), 0o644)
	t.Setenv("MICRA_CONCURRENCY", "5")
	t.Setenv("MICRA_PER_IP", "4")
	t.Setenv("MICRA_BOOTSTRAP", "/ip4/127.0.0.1/tcp/2/p2p/12D3KooWJ6MqnVtvqV7b5bWxqbtqYuxMNwfrfNJXZ4F5bBAVLk1N,/ip4/127.0.0.1/tcp/3/p2p/12D3KooWJ6MqnVtvqV7b5bWxqbtqYuxMNwfrfNJXZ4F5bBAVLk1N")
	c := configOf(t, file, settingsOf(t, "--concurrency", "7", "--monitor=false"))
	if c.Crawl.Concurrency != 7 || c.Crawl.Fetch.PerIPLimit != 4 || c.Crawl.Fetch.MinDelay != 3*time.Second ||
		c.Crawl.Monitor.Enabled || len(c.Overlay.Bootstrap) != 2 || c.DataDir != filepath.Join(dir, "d") || c.Crawl.Scope.MaxDepth != 0 {
		t.Fatalf("concurrency %d (flag 7), per_ip %d (env 4), min_delay %v (file 3s), monitor %v (flag false), bootstrap %q (env's two), data dir %q",
			c.Crawl.Concurrency, c.Crawl.Fetch.PerIPLimit, c.Crawl.Fetch.MinDelay, c.Crawl.Monitor.Enabled, c.Overlay.Bootstrap, c.DataDir)
	}
	c = configOf(t, file, settingsOf(t, "--bootstrap", "/ip4/127.0.0.1/tcp/9/p2p/12D3KooWJ6MqnVtvqV7b5bWxqbtqYuxMNwfrfNJXZ4F5bBAVLk1N"))
	if len(c.Overlay.Bootstrap) != 1 || !strings.Contains(c.Overlay.Bootstrap[0], "/tcp/9/") {
		t.Fatalf("--bootstrap over the file and MICRA_BOOTSTRAP: %q", c.Overlay.Bootstrap)
	}
}

// The flags micra node had before the settings table still work.
func TestDeprecatedNodeFlags(t *testing.T) {
	dir := t.TempDir()
	seeds := filepath.Join(dir, "seeds.txt")
	os.WriteFile(seeds, []byte("# old style\nhttps://example.com/\n"), 0o644)
	empty := filepath.Join(dir, "empty.toml")
	os.WriteFile(empty, nil, 0o644)
	sf := settingsOf(t, "--data", "d", "--no-crawl", "--seeds", seeds)
	var warn bytes.Buffer
	f, err := loadSettings(empty, "", sf, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if f.DataDir != "d" || f.Crawler == nil || *f.Crawler || f.SeedsFile != seeds || len(f.Seeds) != 0 {
		t.Fatalf("--data d --no-crawl --seeds FILE: %+v", f)
	}
	if !strings.Contains(warn.String(), "--seeds-file") {
		t.Errorf("no deprecation note for --seeds FILE: %q", warn.String())
	}
	// --seeds takes URLs: a word that is no file is one
	sf = settingsOf(t, "--seeds", "https://a.example/", "--seeds", "https://b.example/")
	if f, err = loadSettings(empty, "", sf, io.Discard); err != nil || !slices.Equal(f.Seeds, []string{"https://a.example/", "https://b.example/"}) {
		t.Fatalf("--seeds URL --seeds URL: %q %v", f.Seeds, err)
	}
	// the new spellings win over the old
	sf = settingsOf(t, "--data", "old", "--data-dir", "new")
	if f, _ = loadSettings(empty, "", sf, io.Discard); f.DataDir != "new" {
		t.Fatalf("--data old --data-dir new: %q", f.DataDir)
	}
}
