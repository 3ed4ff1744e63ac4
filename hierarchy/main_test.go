package hierarchy

import (
	"testing"

	"go.uber.org/goleak"
)

// Decode builds its lookup index on a second goroutine; none may outlive it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
