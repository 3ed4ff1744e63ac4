package hierarchy

import (
	"math/bits"
	"net/netip"
)

// u128 is an address as an unsigned integer: IPv4 addresses use only the low
// 32 bits of lo. Working on integers rather than netip.Addr keeps the hot
// paths (lookup, build sweep, encoding) free of pointer-carrying values.
type u128 struct{ hi, lo uint64 }

const (
	fam4 uint8 = 4
	fam6 uint8 = 6
)

var (
	max4 = u128{0, 0xFFFFFFFF}
	max6 = u128{^uint64(0), ^uint64(0)}
)

func famMax(f uint8) u128 {
	if f == fam4 {
		return max4
	}
	return max6
}

func (a u128) cmp(b u128) int {
	switch {
	case a.hi < b.hi:
		return -1
	case a.hi > b.hi:
		return 1
	case a.lo < b.lo:
		return -1
	case a.lo > b.lo:
		return 1
	}
	return 0
}

func (a u128) less(b u128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

func (a u128) add1() u128 {
	lo, c := bits.Add64(a.lo, 1, 0)
	return u128{a.hi + c, lo}
}

func (a u128) sub1() u128 {
	lo, b := bits.Sub64(a.lo, 1, 0)
	return u128{a.hi - b, lo}
}

func (a u128) sub(b u128) u128 {
	lo, br := bits.Sub64(a.lo, b.lo, 0)
	return u128{a.hi - b.hi - br, lo}
}

func (a u128) add(b u128) (u128, bool) {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	hi, c2 := bits.Add64(a.hi, b.hi, c)
	return u128{hi, lo}, c2 != 0
}

func (a u128) isZero() bool { return a.hi == 0 && a.lo == 0 }

func (a u128) trailingZeros() uint {
	if a.lo != 0 {
		return uint(bits.TrailingZeros64(a.lo))
	}
	if a.hi != 0 {
		return 64 + uint(bits.TrailingZeros64(a.hi))
	}
	return 128
}

func (a u128) bitLen() uint {
	if a.hi != 0 {
		return 64 + uint(bits.Len64(a.hi))
	}
	return uint(bits.Len64(a.lo))
}

func (a u128) shr(n uint) u128 {
	switch {
	case n == 0:
		return a
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{0, a.hi >> (n - 64)}
	}
	return u128{a.hi >> n, a.lo>>n | a.hi<<(64-n)}
}

func (a u128) shl(n uint) u128 {
	switch {
	case n == 0:
		return a
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{a.lo << (n - 64), 0}
	}
	return u128{a.hi<<n | a.lo>>(64-n), a.lo << n}
}

// fromAddr converts a (zone-less) address; IPv4-mapped IPv6 addresses count
// as IPv4 so that a mapped address finds its IPv4 range.
func fromAddr(a netip.Addr) (uint8, u128, bool) {
	if !a.IsValid() {
		return 0, u128{}, false
	}
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return fam4, u128{0, uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])}, true
	}
	b := a.As16()
	var hi, lo uint64
	for i := 0; i < 8; i++ {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	return fam6, u128{hi, lo}, true
}

func toAddr(f uint8, u u128) netip.Addr {
	if f == fam4 {
		x := uint32(u.lo)
		return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
	}
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[i] = byte(u.hi >> (56 - 8*i))
		b[8+i] = byte(u.lo >> (56 - 8*i))
	}
	return netip.AddrFrom16(b)
}
