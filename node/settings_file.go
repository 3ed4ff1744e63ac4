package node

// The file form of the settings: TOML (config.toml, what `micra init`
// writes), or JSON (node.json, the older form), read by ReadFile; and the
// commented TOML file WriteTOML writes.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// ReadFile reads a configuration file: TOML (.toml) or JSON (.json). Its
// relative paths become relative to the file's directory. Errors name the
// file and the line ("config.toml:7: unknown setting \"min_dely\" (did you
// mean min_delay?)").
func ReadFile(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, err
	}
	f, err := ParseFile(path, b)
	if err != nil {
		return File{}, err
	}
	f.resolvePaths(filepath.Dir(path))
	return f, nil
}

// ParseFile decodes b, the contents of the file name, in the format its
// extension names (.toml or .json). Relative paths stay as written.
func ParseFile(name string, b []byte) (File, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".toml":
		return parseTOML(name, b)
	case ".json":
		f, err := decodeFile(b)
		if err != nil {
			return File{}, fmt.Errorf("%s:%w", name, err)
		}
		return f, nil
	}
	return File{}, fmt.Errorf("%s: a configuration file is .toml (or .json)", name)
}

// tomlRaw keeps a value as the TOML decoder read it.
type tomlRaw struct{ v any }

func (r *tomlRaw) UnmarshalTOML(v any) error { r.v = v; return nil }

func parseTOML(name string, b []byte) (File, error) {
	var raw map[string]tomlRaw
	md, err := toml.NewDecoder(bytes.NewReader(b)).Decode(&raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return File{}, fmt.Errorf("%s:%d: %s", name, pe.Position.Line, pe.Message)
		}
		return File{}, fmt.Errorf("%s: %w", name, err)
	}
	var f File
	var errs []error
	seen := map[string]bool{}
	for _, k := range md.Keys() { // in the file's order
		key := k[0]
		if seen[key] {
			continue
		}
		seen[key] = true
		if err := f.setTOML(key, raw[key].v); err != nil {
			at := name
			if line := keyLine(b, key); line > 0 {
				at = fmt.Sprintf("%s:%d", name, line)
			}
			errs = append(errs, fmt.Errorf("%s: %w", at, err))
		}
	}
	return f, errors.Join(errs...)
}

// setTOML sets one setting from its TOML value.
func (f *File) setTOML(key string, v any) error {
	s, ok := LookupSetting(key)
	if !ok {
		if _, table := v.(map[string]any); table {
			return fmt.Errorf("[%s]: settings are top-level keys, before any [table] (the groups are comments)", key)
		}
		return unknownSetting(key)
	}
	want := func(what string) error {
		return fmt.Errorf("%s: want %s, got %s", key, what, describeTOML(v))
	}
	var text []string
	switch s.Type {
	case "list":
		arr, ok := v.([]any)
		if !ok {
			return want(`a list of strings (["…", "…"])`)
		}
		for _, x := range arr {
			str, ok := x.(string)
			if !ok {
				return fmt.Errorf("%s: want a list of strings, got %s in it", key, describeTOML(x))
			}
			text = append(text, str)
		}
	case "bool":
		b, ok := v.(bool)
		if !ok {
			return want("true or false")
		}
		text = []string{strconv.FormatBool(b)}
	case "int":
		n, ok := v.(int64)
		if !ok {
			return want("a whole number")
		}
		text = []string{strconv.FormatInt(n, 10)}
	default: // string, path, duration
		str, ok := v.(string)
		if !ok {
			return want("a string (in quotes)")
		}
		text = []string{str}
	}
	if err := f.Set(key, text...); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// describeTOML names a decoded TOML value for an error.
func describeTOML(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x) + " (a string)"
	case int64:
		return strconv.FormatInt(x, 10) + " (an integer)"
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64) + " (a float)"
	case bool:
		return strconv.FormatBool(x) + " (a bool)"
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%v (%T)", v, v)
}

// lineProbe fails to decode, so the decoder reports where its key is.
type lineProbe struct{}

var errLineProbe = errors.New("line probe")

func (*lineProbe) UnmarshalTOML(any) error { return errLineProbe }

// keyLine is the line of the top-level key in the TOML document b (0 if
// unknown). The decoder keeps key positions to itself; a struct with one
// field for key, which fails to decode, makes it say.
func keyLine(b []byte, key string) int {
	if strings.ContainsAny(key, "\"\\`") {
		return 0
	}
	t := reflect.StructOf([]reflect.StructField{{
		Name: "F", Type: reflect.TypeFor[lineProbe](), Tag: reflect.StructTag(`toml:"` + key + `"`),
	}})
	_, err := toml.NewDecoder(bytes.NewReader(b)).Decode(reflect.New(t).Interface())
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return pe.Position.Line
	}
	return 0
}

// WriteTOML writes f as a TOML configuration that lists every setting,
// grouped, each under its meaning: the settings f sets (not zero) as keys,
// the others commented out at their default.
func WriteTOML(w io.Writer, f File) error {
	bw := bufio.NewWriter(w)
	v := reflect.ValueOf(f)
	for _, g := range Groups {
		fmt.Fprintf(bw, "\n## %s\n", g)
		for _, s := range Settings {
			if s.Group != g {
				continue
			}
			bw.WriteString("\n")
			writeComment(bw, s.Meaning)
			fv := v.Field(s.field)
			if fv.IsZero() {
				fmt.Fprintf(bw, "# %s = %s\n", s.Key, s.Default)
				continue
			}
			if fv.Kind() == reflect.Pointer {
				fv = fv.Elem()
			}
			var line bytes.Buffer
			if err := toml.NewEncoder(&line).Encode(map[string]any{s.Key: fv.Interface()}); err != nil {
				return fmt.Errorf("%s: %w", s.Key, err)
			}
			bw.Write(line.Bytes())
		}
	}
	return bw.Flush()
}

// writeComment writes text as # lines of at most about 80 columns.
func writeComment(w *bufio.Writer, text string) {
	line := "#"
	for _, word := range strings.Fields(text) {
		if len(line)+1+len(word) > 80 && line != "#" {
			w.WriteString(line + "\n")
			line = "#"
		}
		line += " " + word
	}
	w.WriteString(line + "\n")
}

// allSeeds is seeds and then the URLs of seeds_file (one a line; blank
// lines and # comments skipped). The node reports a seed it cannot parse
// when it routes it (RouteSeeds).
func (f File) allSeeds() ([]string, error) {
	seeds := f.Seeds
	if f.SeedsFile == "" {
		return seeds, nil
	}
	b, err := os.ReadFile(f.SeedsFile)
	if err != nil {
		return nil, fmt.Errorf(" seeds_file: %w", err)
	}
	seeds = append([]string(nil), seeds...)
	for line := range strings.Lines(string(b)) {
		if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
			seeds = append(seeds, s)
		}
	}
	return seeds, nil
}

// controlAddrSetting is the api setting as ControlConfig takes it: the
// control API's URL (http://127.0.0.1:5001, as MICRA_API names it for the
// control commands) names the same host:port.
func controlAddrSetting(s string) string {
	if rest, ok := strings.CutPrefix(s, "http://"); ok {
		return strings.TrimSuffix(rest, "/")
	}
	return s
}
