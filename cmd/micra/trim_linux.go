package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// releaseStartupPages takes the pages of the executable's read-only
// mappings (code, read-only data, the function tables), and the
// page-aligned interior of each data slice given, out of this process's
// page tables (madvise MADV_DONTNEED), and returns how many bytes of
// address space it covered.
//
// Why: every micra process runs the package initialisers of every
// subcommand (the sink's full-text index, the report's fonts and plots,
// the benches, …), and with the kernel's fault-around each one maps 64 KiB
// of the binary around what it touches: 39 MB of the executable is
// resident by the time main runs, 18 MB more than in a binary holding only
// the node (measured, docs/testnet.md). A node that drops them faults back
// in only the pages it uses.
//
// It is safe because the pages are clean copies of the file: a mapping
// with private pages (written before it was made read-only, as a PIE
// build's relocations are) is left alone, so MADV_DONTNEED only unmaps
// pages and the next access maps them again from the page
// cache, as after the kernel reclaimed them. data must be bytes nobody
// writes (embedded files): their pages read back the file's bytes too;
// slices outside the executable's file mappings are left alone.
func releaseStartupPages(data ...[]byte) (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	type span struct{ lo, hi uintptr }
	var spans, file []span // read-only mappings without private pages; all mappings of the executable
	var cur *span          // the executable's read-only mapping whose fields are being read
	keep := func() {
		if cur != nil {
			spans = append(spans, *cur)
			cur = nil
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "Anonymous:" {
			// a page written since it was mapped (relocations of a PIE
			// build's RELRO, say) is a private copy: dropping it would
			// read the file's bytes back in its place
			if fs[1] != "0" {
				cur = nil
			}
			continue
		}
		// a mapping's first line: address perms offset dev inode path
		lo, hi, ok := strings.Cut(fs[0], "-")
		if !ok || len(fs) < 5 {
			continue // another field of the mapping
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		keep()
		if len(fs) < 6 || fs[5] != exe {
			continue
		}
		file = append(file, span{uintptr(a), uintptr(b)})
		if fs[1] == "r-xp" || fs[1] == "r--p" {
			cur = &span{uintptr(a), uintptr(b)}
		}
	}
	keep()
	err = sc.Err()
	f.Close()
	if err != nil {
		return 0, err
	}
	pg := uintptr(os.Getpagesize())
	for _, b := range data {
		a := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		lo, hi := (a+pg-1)&^(pg-1), (a+uintptr(len(b)))&^(pg-1)
		if len(b) == 0 || lo >= hi {
			continue
		}
		// only bytes of the executable's file: anonymous memory (the heap)
		// would read back zeros
		for _, m := range file {
			if m.lo <= lo && hi <= m.hi {
				spans = append(spans, span{lo, hi})
				break
			}
		}
	}
	var n int64
	for _, s := range spans {
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, s.lo, s.hi-s.lo, syscall.MADV_DONTNEED); e != 0 {
			return n, e
		}
		n += int64(s.hi - s.lo)
	}
	return n, nil
}
