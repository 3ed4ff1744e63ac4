package main

// The settings of `micra node` as flags, one per setting of node.Settings
// (--min-delay for min_delay), generated from the table so they never
// drift; the home (--home, $MICRA_HOME, ~/.micra) and its config.toml; and
// the precedence: defaults < file < environment < flags.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/micra-crawler/micra/node"
)

// homeEnv names micra's home when --home does not; the default is ~/.micra.
const homeEnv = "MICRA_HOME"

// configName is the configuration file in a home.
const configName = "config.toml"

// settingValue is the flag of one setting: it checks a value as the file
// form does and keeps it as text for File.Set.
type settingValue struct {
	s       node.Setting
	vals    []string
	changed bool // vals are the command line's, not the defaults (Replace)
	// oldSeedsFile: --seeds FILE, the older meaning of --seeds (now URLs)
	oldSeedsFile string
}

func (v *settingValue) String() string { return strings.Join(v.vals, ",") }

func (v *settingValue) Type() string {
	if v.s.Type == "list" {
		return "strings"
	}
	return v.s.Type
}

func (v *settingValue) Set(x string) error {
	if v.s.Key == "seeds" && !strings.Contains(x, "://") {
		if fi, err := os.Stat(x); err == nil && fi.Mode().IsRegular() {
			v.oldSeedsFile = x
			return nil
		}
	}
	var probe node.File
	if err := probe.Set(v.s.Key, x); err != nil {
		return err
	}
	if v.s.Type == "list" && v.changed {
		v.vals = append(v.vals, x)
	} else {
		v.vals = []string{x}
	}
	v.changed = true
	return nil
}

// pflag.SliceValue, for the list settings (and tests resetting flags).
func (v *settingValue) Append(x string) error { return v.Set(x) }
func (v *settingValue) Replace(xs []string) error {
	v.vals, v.oldSeedsFile = nil, ""
	for _, x := range xs {
		if err := v.Set(x); err != nil {
			return err
		}
	}
	v.changed = false // the next Set starts a new list
	return nil
}
func (v *settingValue) GetSlice() []string { return v.vals }

// settingFlags are the flags of the settings on one flag set.
type settingFlags struct {
	fs   *pflag.FlagSet
	vals []*settingValue // in the order of node.Settings

	// deprecated spellings of micra node's flags before the settings table
	data    string // --data DIR: --data-dir
	noCrawl bool   // --no-crawl: --crawler=false
}

// addSettingFlags adds a flag for every setting, and the older spellings.
func addSettingFlags(fs *pflag.FlagSet) *settingFlags {
	sf := &settingFlags{fs: fs}
	for _, s := range node.Settings {
		v := &settingValue{s: s}
		def, err := s.Values(s.Default)
		if err != nil {
			panic(err) // TestSettingsTableMatchesFile
		}
		defText := strings.Join(def, ",")
		if s.Type == "list" && len(def) > 0 {
			defText = "[" + defText + "]"
		}
		usage := strings.ReplaceAll(s.Meaning, "`", "'") // a backquoted word would name the flag's value
		if s.Type == "list" {
			usage += "; repeatable"
		}
		usage += " [$" + s.Env() + "]"
		fl := fs.VarPF(v, s.Flag(), "", usage)
		fl.DefValue = defText
		if s.Type == "bool" {
			fl.NoOptDefVal = "true"
		}
		sf.vals = append(sf.vals, v)
	}
	fs.StringVar(&sf.data, "data", "", "data directory")
	fs.MarkDeprecated("data", "use --data-dir")
	fs.BoolVar(&sf.noCrawl, "no-crawl", false, "overlay peer only")
	fs.MarkDeprecated("no-crawl", "use --crawler=false")
	return sf
}

// apply sets f's settings from the flags given on the command line; w gets
// the deprecation notes. Paths are the working directory's, as given.
func (sf *settingFlags) apply(f *node.File, w io.Writer) error {
	if sf.fs.Changed("data") && !sf.fs.Changed("data-dir") {
		f.DataDir = sf.data
	}
	if sf.fs.Changed("no-crawl") && !sf.fs.Changed("crawler") {
		crawl := !sf.noCrawl
		f.Crawler = &crawl
	}
	for _, v := range sf.vals {
		if v.oldSeedsFile != "" {
			if sf.fs.Changed("seeds-file") {
				return fmt.Errorf("--seeds %s: a file, but --seeds-file is given too (--seeds takes URLs)", v.oldSeedsFile)
			}
			fmt.Fprintf(w, "micra: --seeds FILE is deprecated: --seeds takes URLs now; use --seeds-file %s\n", v.oldSeedsFile)
			f.SeedsFile = v.oldSeedsFile
		}
		if !sf.fs.Changed(v.s.Flag()) || (v.s.Type == "list" && len(v.vals) == 0) {
			continue
		}
		if err := f.Set(v.s.Key, v.vals...); err != nil {
			return fmt.Errorf("--%s: %w", v.s.Flag(), err)
		}
	}
	return nil
}

// defaultHome is $MICRA_HOME, else ~/.micra; explicit says it was named
// ($MICRA_HOME), not assumed.
func defaultHome() (home string, explicit bool, err error) {
	if h := os.Getenv(homeEnv); h != "" {
		return h, true, nil
	}
	u, err := os.UserHomeDir()
	if err != nil {
		return "", false, fmt.Errorf("no home directory for ~/.micra (give --home DIR or set %s): %w", homeEnv, err)
	}
	return filepath.Join(u, ".micra"), false, nil
}

// configFile is the configuration file to read: --config FILE, else the
// home's config.toml — required when the home is named (--home, $MICRA_HOME),
// optional for ~/.micra (then "": the defaults and what env and flags say).
func configFile(config, home string) (string, error) {
	if config != "" {
		if home != "" {
			return "", errors.New("--config FILE and --home DIR exclude each other (a home's file is DIR/" + configName + ")")
		}
		return config, nil
	}
	explicit := home != ""
	if !explicit {
		var err error
		if home, explicit, err = defaultHome(); err != nil {
			return "", nil // no home to look in: the defaults
		}
	}
	path := filepath.Join(home, configName)
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if !explicit {
				return "", nil
			}
			return "", fmt.Errorf("no micra home at %s (%s not found): create one with `micra init --home %s`", home, path, home)
		}
		return "", err
	}
	return path, nil
}

// loadSettings is the node's settings in order of precedence: the file
// (configFile), the environment (MICRA_<KEY>), the flags. w gets warnings.
func loadSettings(config, home string, sf *settingFlags, w io.Writer) (node.File, error) {
	var f node.File
	path, err := configFile(config, home)
	if err != nil {
		return f, err
	}
	if path != "" {
		if f, err = node.ReadFile(path); err != nil {
			return f, err
		}
	}
	for _, note := range node.EnvTypos(os.Environ()) {
		fmt.Fprintln(w, "micra: warning:", note)
	}
	if err := f.ApplyEnv(os.LookupEnv); err != nil {
		return f, err
	}
	if sf != nil {
		if err := sf.apply(&f, w); err != nil {
			return f, err
		}
	}
	return f, nil
}

// nodeConfig is `micra node`'s configuration: defaults < file (--config
// FILE, or the home's config.toml) < environment < flags.
func (o *nodeOptions) nodeConfig(warn io.Writer) (node.Config, error) {
	f, err := loadSettings(o.config, o.home, o.settings, warn)
	if err != nil {
		return node.Config{}, fmt.Errorf("node: %w", err)
	}
	cfg, err := f.Config()
	if err != nil {
		return node.Config{}, fmt.Errorf("node:%w", err)
	}
	if cfg.DataDir == "" {
		return cfg, errors.New("node: a data directory is required: create a home with `micra init` (then micra node [--home DIR]), or give --data-dir DIR or data_dir in --config FILE")
	}
	return cfg, nil
}
