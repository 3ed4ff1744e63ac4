package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
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
	cleanup := isolateSettings()
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// Regression (the defect it caught): a command other than crawl cut short
// by SIGINT said only "context canceled" and exited 1; every command cut
// short by a signal names it and exits 128+signal, as shells report it.
func TestSimSIGINTExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	// a run long enough to be interrupted: the scale preset's placement alone
	// takes tens of seconds
	cmd := exec.Command(os.Args[0], "sim", "--preset", "scale", "--policies", "hash")
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("micra sim did not stop on SIGINT\n%s", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(out.String(), "interrupted (SIGINT)") {
		t.Fatalf("micra sim interrupted: exit %d, want 130 and the signal named:\n%s", code, out.String())
	}
}

// micra version names the protocols this binary speaks and the embedded
// hierarchy peers must share; --version prints the version alone.
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := printVersion(&out, true); err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Version == "" || v.Go == "" || len(v.Protocols) < 7 || !slices.Contains(v.Protocols, "/micra/carrier/1") {
		t.Fatalf("version %+v", v)
	}
}
