package pack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// CarrierExt is the file extension of carriers written by FileSink.
const CarrierExt = ".mcar"

// FileSink is a Receiver that writes each carrier to its own file in Dir,
// named by the carrier ID. It acknowledges only after the file is fsynced,
// renamed into place and the directory fsynced, so an acknowledged carrier
// survives a crash; a redelivery overwrites the same file (idempotent).
type FileSink struct {
	Dir string

	// syncDir makes a rename in Dir durable (nil: syncDir); tests make it fail.
	syncDir func(dir string) error
}

// Deliver writes c to Dir/<id>.mcar.
func (s FileSink) Deliver(ctx context.Context, c Carrier) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sync := s.syncDir
	if sync == nil {
		sync = syncDir
	}
	if err := mkdirDurable(s.Dir, sync); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	name := filepath.Join(s.Dir, sanitizeFileName(c.ID())+CarrierExt)
	f, err := os.CreateTemp(s.Dir, ".carrier-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(c.Data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("file sink: %w", err)
	}
	// Sync the directory so the rename itself is durable. Until it is, the
	// carrier is not acknowledged: the outbox keeps it and delivers it again,
	// overwriting the same file.
	if err := sync(s.Dir); err != nil {
		return fmt.Errorf("file sink: sync directory %s after writing %s: %w", s.Dir, filepath.Base(name), err)
	}
	return nil
}

// mkdirDurable creates dir and its missing parents, syncing the parent of
// each directory it creates: an entry is durable only once its parent
// directory is synced, and a carrier acknowledged in a directory a power
// cut then loses is lost with it.
func mkdirDurable(dir string, sync func(string) error) error {
	var created []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !os.IsNotExist(err) {
			return err
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(created) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// outermost first: each new directory's entry, in its parent
	for i := len(created) - 1; i >= 0; i-- {
		if err := sync(filepath.Dir(created[i])); err != nil {
			return fmt.Errorf("sync directory %s after creating %s: %w", filepath.Dir(created[i]), filepath.Base(created[i]), err)
		}
	}
	return nil
}

// syncDir fsyncs the directory dir, making the entries created or renamed in
// it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func sanitizeFileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 || r == ':' {
			return '_'
		}
		return r
	}, s)
}

// ReadFile decodes one carrier file.
func ReadFile(path string) (Header, []Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Header{}, nil, err
	}
	h, recs, err := Decode(data)
	if err != nil {
		return h, recs, fmt.Errorf("%s: %w", path, err)
	}
	return h, recs, nil
}

// CarrierFiles lists the carrier files in dir in name order (crawler, then sequence).
func CarrierFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), CarrierExt) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// ReadDir decodes every carrier in dir and calls fn for each record. It stops
// at the first error, naming the file.
func ReadDir(dir string, fn func(Header, *Record) error) error {
	files, err := CarrierFiles(dir)
	if err != nil {
		return err
	}
	for _, f := range files {
		h, recs, err := ReadFile(f)
		if err != nil {
			return err
		}
		for i := range recs {
			if err := fn(h, &recs[i]); err != nil {
				return err
			}
		}
	}
	return nil
}
