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
// It is safe because the pages are clean copies of the file: a private
// read-only file mapping cannot have been written, so MADV_DONTNEED only
// unmaps its pages and the next access maps them again from the page
// cache, as after the kernel reclaimed them. data must be bytes nobody
// writes (embedded files): their pages read back the file's bytes too;
// slices outside the executable's file mappings are left alone.
func releaseStartupPages(data ...[]byte) (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	type span struct{ lo, hi uintptr }
	var spans, file []span // read-only mappings; all mappings of the executable
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[5] != exe {
			continue
		}
		lo, hi, ok := strings.Cut(fs[0], "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			continue
		}
		file = append(file, span{uintptr(a), uintptr(b)})
		if fs[1] == "r-xp" || fs[1] == "r--p" {
			spans = append(spans, span{uintptr(a), uintptr(b)})
		}
	}
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
