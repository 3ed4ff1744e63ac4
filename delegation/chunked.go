package delegation

// chunked is an append-only store addressed by index, in fixed-size chunks:
// growing it never copies what it holds (a slice doubling re-copies every
// element, and the engine's and directory's stores grow by one per new
// subnet, for as long as they live).
type chunked[T any] struct {
	chunks [][]T
	n      int32
}

const chunkBits = 8 // 256 values a chunk

// add appends a zero value and returns its index.
func (c *chunked[T]) add() int32 {
	if int(c.n)>>chunkBits == len(c.chunks) {
		c.chunks = append(c.chunks, make([]T, 1<<chunkBits))
	}
	c.n++
	return c.n - 1
}

// at returns the value at index i (< len).
func (c *chunked[T]) at(i int32) *T { return &c.chunks[i>>chunkBits][i&(1<<chunkBits-1)] }
