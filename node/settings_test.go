package node

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The table cannot drift from File: every field has a setting, every
// setting a field, and the setting's type is the field's.
func TestSettingsTableMatchesFile(t *testing.T) {
	t.Parallel()
	ft := reflect.TypeFor[File]()
	keys := map[string]bool{}
	for _, s := range Settings {
		if keys[s.Key] {
			t.Errorf("setting %s listed twice", s.Key)
		}
		keys[s.Key] = true
		if s.field < 0 {
			t.Errorf("setting %s has no File field (a field with json:%q)", s.Key, s.Key)
			continue
		}
		if !slices.Contains(Groups, s.Group) || s.Meaning == "" || s.Default == "" || s.Example == "" {
			t.Errorf("setting %s: group %q, meaning %q, default %q, example %q", s.Key, s.Group, s.Meaning, s.Default, s.Example)
		}
		want := map[reflect.Kind][]string{
			reflect.String: {"string", "path", "duration"}, reflect.Bool: {"bool"}, reflect.Pointer: {"bool"},
			reflect.Int: {"int"}, reflect.Slice: {"list"},
		}[ft.Field(s.field).Type.Kind()]
		if !slices.Contains(want, s.Type) {
			t.Errorf("setting %s: type %s, but its field is a %s", s.Key, s.Type, ft.Field(s.field).Type)
		}
	}
	for i := range ft.NumField() {
		if k := fileKey(ft.Field(i)); !keys[k] {
			t.Errorf("File.%s (%q) has no entry in Settings: add its default and meaning", ft.Field(i).Name, k)
		}
	}
}

// The path settings are the ones resolvePaths makes relative to the file.
func TestSettingsPathsAreResolved(t *testing.T) {
	t.Parallel()
	var f File
	v := reflect.ValueOf(&f).Elem()
	for _, s := range Settings {
		if v.Field(s.field).Kind() == reflect.String {
			v.Field(s.field).SetString("rel")
		}
	}
	f.resolvePaths("/etc/micra")
	for _, s := range Settings {
		if v.Field(s.field).Kind() != reflect.String {
			continue
		}
		resolved := v.Field(s.field).String() != "rel"
		if resolved != (s.Type == "path") {
			t.Errorf("setting %s (type %s): resolved against the file's directory: %v", s.Key, s.Type, resolved)
		}
	}
}

// exampleText is a TOML literal as text: the values a flag or (joined by
// commas) an environment variable takes.
func exampleText(t *testing.T, lit string) []string {
	t.Helper()
	var m map[string]any
	if _, err := toml.Decode("x = "+lit, &m); err != nil {
		t.Fatalf("%s: %v", lit, err)
	}
	if arr, ok := m["x"].([]any); ok {
		var out []string
		for _, x := range arr {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	return []string{fmt.Sprint(m["x"])}
}

// sameConfig compares two Configs, functions aside (the defaults' ProbeGuard).
func sameConfig(a, b Config) bool {
	a.Overlay.ProbeGuard, b.Overlay.ProbeGuard = nil, nil
	return reflect.DeepEqual(a, b)
}

// Every setting reaches the Config, and the same from the file as from the
// environment (the flags: cmd/micra's TestSettingsFromEverySource).
func TestSettingsFromFileAndEnv(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "seeds.txt"), []byte("# seeds\nhttps://example.com/\n\nhttps://example.com/b\n"), 0o644)
	t.Chdir(dir) // relative paths: the file's directory is the working directory
	base, err := File{}.Config()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range Settings {
		t.Run(s.Key, func(t *testing.T) {
			path := filepath.Join(dir, s.Key+".toml")
			os.WriteFile(path, []byte(s.Key+" = "+s.Example+"\n"), 0o644)
			ff, err := ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fromFile, err := ff.Config()
			if err != nil {
				t.Fatal(err)
			}
			var fe File
			env := strings.Join(exampleText(t, s.Example), ",")
			if s.Type == "path" {
				env = filepath.Join(dir, env) // a path in the environment is the working directory's: kept as written
			}
			if err := fe.ApplyEnv(func(k string) (string, bool) { return env, k == s.Env() }); err != nil {
				t.Fatal(err)
			}
			fromEnv, err := fe.Config()
			if err != nil {
				t.Fatal(err)
			}
			if sameConfig(fromFile, base) {
				t.Errorf("%s = %s changes nothing in the Config", s.Key, s.Example)
			}
			if !sameConfig(fromFile, fromEnv) {
				t.Errorf("%s = %s in the file and %s=%s give different Configs:\n%+v\n%+v", s.Key, s.Example, s.Env(), env, fromFile, fromEnv)
			}
		})
	}
}

func TestTOMLErrorsNameFileLineAndKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"data_dir = \"d\"\n\n# x\nmin_dely = \"1s\"\n", `config.toml:4: unknown setting "min_dely" (did you mean min_delay?)`},
		{"min-delay = \"1s\"\n", `config.toml:1: unknown setting "min-delay" (did you mean min_delay?)`},
		{"data_dir = \"d\"\nconcurrency = \"4\"\n", `config.toml:2: concurrency: want a whole number, got "4" (a string)`},
		{"concurrency = -4\n", `config.toml:1: concurrency: -4 must not be negative`},
		{"\nsleep = \"4 days\"\n", `config.toml:2: sleep: "4 days" is not a duration`},
		{"crawler_addr = \"1.2.3\"\n", `config.toml:1: crawler_addr: "1.2.3" is not an IP address`},
		{"policy = \"nearest\"\n", `config.toml:1: policy: unknown delegation policy "nearest"`},
		{"balance = \"fair\"\n", `config.toml:1: balance: delegation: unknown balance mode "fair"`},
		{"listen = \"/ip4/0.0.0.0/tcp/1\"\n", `config.toml:1: listen: want a list of strings`},
		{"seeds = [\"a\", 1]\n", `config.toml:1: seeds: want a list of strings, got 1 (an integer) in it`},
		{"testnet = \"yes\"\n", `config.toml:1: testnet: want true or false, got "yes" (a string)`},
		{"data_dir = \"d\"\n[crawl]\nmin_delay = \"1s\"\n", `config.toml:2: [crawl]: settings are top-level keys`},
		{"data_dir = \"d\"\ndata_dir = \"e\"\n", `config.toml:2: `},
		{"data_dir = \n", `config.toml:1: `},
	} {
		_, err := ParseFile("config.toml", []byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	// every error at once, in the file's order
	_, err := ParseFile("config.toml", []byte("a_setting = 1\nconcurrency = true\n"))
	if err == nil || !regexp.MustCompile(`(?s)config.toml:1: .*a_setting.*\nconfig.toml:2: concurrency`).MatchString(err.Error()) {
		t.Errorf("two errors: %v", err)
	}
	if _, err := ParseFile("node.yaml", nil); err == nil {
		t.Error("a .yaml file accepted")
	}
}

func TestEnvErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	env := map[string]string{"MICRA_MIN_DELAY": "soon", "MICRA_CONCURRENCY": "many", "MICRA_TESTNET": "1", "MICRA_SEEDS": "https://a.example/, https://b.example/"}
	var f File
	err := f.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	for _, want := range []string{`MICRA_MIN_DELAY: "soon" is not a duration`, `MICRA_CONCURRENCY: "many": want a whole number`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ApplyEnv: %v, want %q", err, want)
		}
	}
	if !f.Testnet || !slices.Equal(f.Seeds, []string{"https://a.example/", "https://b.example/"}) {
		t.Errorf("the good variables: testnet %v, seeds %q", f.Testnet, f.Seeds)
	}
	notes := EnvTypos([]string{"MICRA_MIN_DELY=1s", "MICRA_HOME=/x", "MICRA_ASN_DIR=/y", "PATH=/bin"})
	if len(notes) != 1 || !strings.Contains(notes[0], "MICRA_MIN_DELAY") {
		t.Errorf("EnvTypos: %q", notes)
	}
}

// The file micra init writes parses back to the defaults; with every
// default uncommented it still does (the defaults are written as values
// that mean the default) and validates.
func TestWriteTOMLParsesBackToTheDefaults(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := WriteTOML(&buf, File{DataDir: "data"}); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, s := range Settings {
		if !strings.Contains(text, "\n# "+s.Key+" = "+s.Default+"\n") && s.Key != "data_dir" {
			t.Errorf("%s not listed at its default:\n%s", s.Key, text)
		}
	}
	f, err := ParseFile("config.toml", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f, File{DataDir: "data"}) {
		t.Fatalf("parsed back: %+v", f)
	}
	def := DefaultConfig()
	def.DataDir = "data"
	got, err := f.Config()
	if err != nil || !sameConfig(got, def) {
		t.Fatalf("config %+v (%v), want the defaults %+v", got, err, def)
	}
	uncommented := regexp.MustCompile(`(?m)^# ([a-z_]+ = )`).ReplaceAllString(text, "$1")
	if f, err = ParseFile("config.toml", []byte(uncommented)); err != nil {
		t.Fatalf("every default uncommented: %v\n%s", err, uncommented)
	}
	if c, err := f.Config(); err != nil || c.Validate() != nil {
		t.Fatalf("every default uncommented: %v %v", err, c.Validate())
	}
}

// WriteTOML (micra config show) writes what is set so that it reads back.
func TestWriteTOMLRoundTrip(t *testing.T) {
	t.Parallel()
	var f File
	for _, s := range Settings {
		if err := f.Set(s.Key, exampleText(t, s.Example)...); err != nil {
			t.Fatalf("%s = %s: %v", s.Key, s.Example, err)
		}
	}
	var buf bytes.Buffer
	if err := WriteTOML(&buf, f); err != nil {
		t.Fatal(err)
	}
	back, err := ParseFile("c.toml", buf.Bytes())
	if err != nil || !reflect.DeepEqual(back, f) {
		t.Fatalf("read back %+v (%v), want %+v\n%s", back, err, f, buf.String())
	}
}

func TestSettingExamplesAreValid(t *testing.T) {
	t.Parallel()
	var f File
	for _, s := range []string{"bootstrap", "sink"} {
		st, _ := LookupSetting(s)
		addr := exampleText(t, st.Example)[0]
		if _, err := peer.AddrInfoFromString(addr); err != nil {
			t.Errorf("%s example %s: %v", s, addr, err)
		}
	}
	if err := f.Set("min_delay", "1s", "2s"); err == nil {
		t.Error("two values for a duration accepted")
	}
	if err := f.Set("min_dely", "1s"); err == nil || !strings.Contains(err.Error(), "did you mean min_delay") {
		t.Errorf("Set(min_dely): %v", err)
	}
}

// seeds_file, relative to the file's directory, adds its URLs to seeds;
// api takes the control API's URL too (as MICRA_API names it).
func TestSeedsFileAndAPIURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "seeds.txt"), []byte("https://b.example/\n  # comment\n\nhttps://c.example/\n"), 0o644)
	path := filepath.Join(dir, "config.toml")
	os.WriteFile(path, []byte(`data_dir = "d"
seeds = ["https://a.example/"]
seeds_file = "seeds.txt"
api = "http://127.0.0.1:5001/"
`), 0o644)
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"https://a.example/", "https://b.example/", "https://c.example/"}; !slices.Equal(c.Seeds, want) {
		t.Errorf("seeds %q, want %q", c.Seeds, want)
	}
	if c.ControlAddr != "127.0.0.1:5001" || c.DataDir != filepath.Join(dir, "d") {
		t.Errorf("api %q, data dir %q", c.ControlAddr, c.DataDir)
	}
	os.WriteFile(path, []byte(`seeds_file = "gone.txt"`), 0o644)
	if _, err := LoadFile(path); err == nil || !strings.Contains(err.Error(), "seeds_file") {
		t.Errorf("a missing seeds file: %v", err)
	}
}

var updateDocs = flag.Bool("update-docs", false, "rewrite the settings table in docs/node.md")

// settingsMarkdown is the settings table of docs/node.md.
func settingsMarkdown() string {
	var b strings.Builder
	for _, g := range Groups {
		fmt.Fprintf(&b, "\n**%s**\n\n| key | variable, flag | type | default | meaning |\n|---|---|---|---|---|\n", g)
		for _, s := range Settings {
			if s.Group == g {
				fmt.Fprintf(&b, "| `%s` | `%s`, `--%s` | %s | `%s` | %s |\n", s.Key, s.Env(), s.Flag(), s.Type, s.Default,
					strings.NewReplacer("|", `\|`, "<", "&lt;").Replace(s.Meaning))
			}
		}
	}
	return b.String()
}

// docs/node.md lists the settings as the table says (go test ./node -run
// SettingsDoc -update-docs rewrites its table).
func TestSettingsDoc(t *testing.T) {
	const begin, end = "<!-- settings: generated from node.Settings (go test ./node -run SettingsDoc -update-docs) -->\n", "<!-- end of settings -->"
	path := filepath.Join("..", "docs", "node.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q … %q", path, begin, end)
	}
	want := settingsMarkdown() + "\n"
	if got := doc[i+len(begin) : j]; got != want {
		if *updateDocs {
			if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("the settings table of %s is not node.Settings': go test ./node -run SettingsDoc -update-docs", path)
	}
}
