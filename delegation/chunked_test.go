package delegation

import "testing"

// TestChunked: values added across many chunks read back by index, and a
// pointer taken early still addresses its value after the store has grown
// (chunks never move).
func TestChunked(t *testing.T) {
	var c chunked[[2]int]
	first := c.at(c.add())
	first[0] = -1
	for i := 1; i < 5*(1<<chunkBits)+3; i++ {
		j := c.add()
		if int(j) != i {
			t.Fatalf("add %d returned index %d", i, j)
		}
		if v := *c.at(j); v != [2]int{} {
			t.Fatalf("new value %d is %v, not zero", j, v)
		}
		c.at(j)[0], c.at(j)[1] = i, 2*i
	}
	if first[0] != -1 || c.at(0)[0] != -1 {
		t.Fatalf("value 0 lost: %v through the early pointer, %v by index", *first, *c.at(0))
	}
	// after growth, the early pointer and the index still name one value
	first[1] = -2
	if c.at(0)[1] != -2 {
		t.Fatalf("a write through the early pointer is not seen by index: %v", *c.at(0))
	}
	c.at(0)[0] = -3
	if first[0] != -3 {
		t.Fatalf("a write by index is not seen through the early pointer: %v", *first)
	}
	for i := int32(1); i < c.n; i++ {
		if v := *c.at(i); v != [2]int{int(i), 2 * int(i)} {
			t.Fatalf("value %d reads %v", i, v)
		}
	}
}
