package main

import (
	"os"
	"testing"
)

// mainEnv, set in a child process started from a test, makes the test
// binary run micra's main with the child's arguments: the real binary's
// code path (flags, signal handling, exit status) without a go build.
const mainEnv = "MICRA_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Args = append([]string{"micra"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
