package upgrade

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// setup writes the running binary v1 (a shell script: these tests run real
// processes) as exe, installs v2 over it with a release on trial, and
// returns the supervisor.
func setup(t *testing.T, v1, v2 string) (*Supervisor, string, string) {
	t.Helper()
	dir := t.TempDir()
	exe, rel := filepath.Join(dir, "micra"), filepath.Join(dir, "release")
	script := func(body string) string { return "#!/bin/sh\nREL=" + rel + "\n" + body + "\n" }
	if err := os.WriteFile(exe, []byte(script(v1)), 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "downloaded")
	if err := os.WriteFile(src, []byte(script(v2)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Install(exe, src, rel, Pending{From: "v1.0.0", To: "v2.0.0", SHA256: "ab12", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return &Supervisor{Exe: exe, Dir: rel, HealthTimeout: 20 * time.Second, Settle: 100 * time.Millisecond,
		Stdout: io.Discard, Stderr: io.Discard, Log: quiet}, exe, rel
}

const healthy = `printf '{"version":"v2.0.0","pid":%d}' $$ > $REL/healthy.json`

func TestInstallKeepsPrevious(t *testing.T) {
	_, exe, rel := setup(t, "echo v1", "echo v2")
	if b, _ := os.ReadFile(exe); !strings.Contains(string(b), "echo v2") {
		t.Fatalf("exe after install: %s", b)
	}
	if b, _ := os.ReadFile(exe + ".prev"); !strings.Contains(string(b), "echo v1") {
		t.Fatalf("previous binary: %s", b)
	}
	if fi, err := os.Stat(exe); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("exe mode %v, %v", fi.Mode(), err)
	}
	p, ok, err := ReadPending(rel)
	if err != nil || !ok || p.To != "v2.0.0" || p.Prev != exe+".prev" {
		t.Fatalf("pending %+v %v %v", p, ok, err)
	}
	if _, err := os.Stat(exe + ".new"); !os.IsNotExist(err) {
		t.Errorf("the staged copy stayed: %v", err)
	}
}

// v2 exits at every start: after MaxStarts starts v1 is back, runs, and the
// rollback is recorded.
func TestSupervisorRollsBackCrashLoop(t *testing.T) {
	s, exe, rel := setup(t, "touch $REL/v1-ran; exit 0", "exit 3")
	var told Rollback
	s.OnRollback = func(rb Rollback) { told = rb }
	code, err := s.Run(context.Background())
	if err != nil || code != 0 {
		t.Fatalf("run: %d, %v", code, err)
	}
	if b, _ := os.ReadFile(exe); !strings.Contains(string(b), "v1-ran") {
		t.Fatalf("exe after rollback: %s", b)
	}
	if _, err := os.Stat(filepath.Join(rel, "v1-ran")); err != nil {
		t.Fatal("v1 did not run after the rollback")
	}
	rb, ok, err := ReadRollback(rel)
	if err != nil || !ok || rb.Version != "v2.0.0" || !strings.Contains(rb.Reason, "exited 3 times") || told.Version != rb.Version || told.Reason != rb.Reason {
		t.Fatalf("rollback %+v %v %v (told %+v)", rb, ok, err, told)
	}
	if _, ok, _ := ReadPending(rel); ok {
		t.Error("the trial is still pending")
	}
}

// v2 starts but never says it is healthy: stopped at the health timeout,
// rolled back.
func TestSupervisorRollsBackUnhealthy(t *testing.T) {
	s, exe, rel := setup(t, "exit 0", "exec sleep 30")
	s.HealthTimeout = 300 * time.Millisecond
	code, err := s.Run(context.Background())
	if err != nil || code != 0 {
		t.Fatalf("run: %d, %v", code, err)
	}
	if b, _ := os.ReadFile(exe); strings.Contains(string(b), "sleep") {
		t.Fatal("v2 still installed")
	}
	if rb, ok, _ := ReadRollback(rel); !ok || !strings.Contains(rb.Reason, "not healthy within") {
		t.Fatalf("rollback %+v", rb)
	}
}

// v2 says it is healthy and keeps running past Settle: it stays, and the
// previous binary is kept.
func TestSupervisorConfirmsHealthy(t *testing.T) {
	s, exe, rel := setup(t, "exit 9", healthy+"\nsleep 1\nexit 0")
	code, err := s.Run(context.Background())
	if err != nil || code != 0 {
		t.Fatalf("run: %d, %v", code, err)
	}
	if _, ok, _ := ReadPending(rel); ok {
		t.Error("still on trial")
	}
	if _, ok, _ := ReadRollback(rel); ok {
		t.Error("rolled back")
	}
	if b, _ := os.ReadFile(exe); !strings.Contains(string(b), "healthy.json") {
		t.Fatal("v2 not kept")
	}
	if _, err := os.Stat(exe + ".prev"); err != nil {
		t.Fatal("previous binary not kept")
	}
}

// Stopping the supervisor stops the node with SIGTERM (its graceful
// shutdown) and returns its status; nothing is rolled back.
func TestSupervisorForwardsStop(t *testing.T) {
	s, _, rel := setup(t, "exit 0", healthy+"\nexec sleep 30")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var code int
	go func() { code, _ = s.Run(ctx); close(done) }()
	for {
		if h, ok, _ := ReadHealthy(rel); ok && h.Version == "v2.0.0" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if code != 128+15 {
		t.Errorf("status %d, want %d (SIGTERM)", code, 128+15)
	}
	if _, ok, _ := ReadRollback(rel); ok {
		t.Error("a stop rolled back")
	}
}

// v2 proves healthy, then installs v3 and exits to restart on it (as a
// node does); v3 exits at every start and is rolled back to v2, which the
// supervisor starts again: a confirmed release is the one rolled back to.
func TestSupervisorRollsBackToConfirmedRelease(t *testing.T) {
	s, exe, rel := setup(t, "exit 9", "")
	v3 := filepath.Join(t.TempDir(), "v3")
	if err := os.WriteFile(v3, []byte("#!/bin/sh\nexit 4\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	v2 := "#!/bin/sh\nREL=" + rel + "\n" + `if [ -e $REL/v2-again ]; then exit 0; fi
touch $REL/v2-again
printf '{"version":"v2.0.0","pid":%d}' $$ > $REL/healthy.json
sleep 1
cp ` + v3 + ` ` + exe + `.new && cp ` + exe + ` ` + exe + `.prev
printf '{"from":"v2.0.0","to":"v3.0.0","sha256":"cd34","exe":"%s","prev":"%s.prev"}' ` + exe + ` ` + exe + ` > $REL/upgrade.json
mv ` + exe + `.new ` + exe + `
exit 75
`
	if err := os.WriteFile(exe, []byte(v2), 0o755); err != nil {
		t.Fatal(err)
	}
	code, err := s.Run(context.Background())
	if err != nil || code != 0 {
		t.Fatalf("run: %d, %v", code, err)
	}
	rb, ok, _ := ReadRollback(rel)
	if !ok || rb.Version != "v3.0.0" || !strings.Contains(rb.Reason, "exited 3 times") {
		t.Fatalf("rollback %+v", rb)
	}
	if b, _ := os.ReadFile(exe); !strings.Contains(string(b), "v2-again") {
		t.Fatalf("not v2 after the rollback: %s", b)
	}
}

func TestWaveDelay(t *testing.T) {
	const window = time.Hour
	var buckets [4]int
	for i := range 400 {
		d := WaveDelay(fmt.Sprintf("peer-%d", i), "ab12", window, nil)
		if d < 0 || d >= window {
			t.Fatalf("delay %v outside [0, %v)", d, window)
		}
		if d != WaveDelay(fmt.Sprintf("peer-%d", i), "ab12", window, nil) {
			t.Fatal("not the same delay for the same node and release")
		}
		buckets[d*4/window]++
	}
	for q, n := range buckets {
		if n < 60 { // 100 expected per quarter
			t.Errorf("quarter %d of the window holds %d of 400 nodes: %v", q, n, buckets)
		}
	}
	if WaveDelay("a", "b", 0, nil) != 0 {
		t.Error("no window: a delay")
	}
}

// Members that know each other take one slot each: n nodes restart
// window/n apart whatever their ids, and the order changes with the
// release.
func TestWaveDelaySlots(t *testing.T) {
	const window = 8 * time.Second
	orders := map[string]bool{}
	for rel := range 20 {
		sha := fmt.Sprintf("%064x", rel)
		members := []string{"12D3KooWA", "12D3KooWB", "12D3KooWC"}
		var delays []time.Duration
		first := ""
		for _, id := range members {
			// each node's view: the others, itself included or not
			d := WaveDelay(id, sha, window, members)
			if d != WaveDelay(id, sha, window, others(members, id)) {
				t.Fatalf("%s: %v depends on whether the view holds itself", id, d)
			}
			if d.Round(time.Millisecond) == (window / 6).Round(time.Millisecond) {
				first = id
			}
			delays = append(delays, d)
		}
		slices.Sort(delays)
		want := []time.Duration{window / 6, window / 2, window * 5 / 6}
		for i := range want {
			if delays[i].Round(time.Millisecond) != want[i].Round(time.Millisecond) {
				t.Fatalf("release %d: delays %v, want %v", rel, delays, want)
			}
		}
		if first == "" {
			t.Fatalf("release %d: no node in the first slot", rel)
		}
		orders[first] = true
	}
	if len(orders) < 2 {
		t.Errorf("the same node goes first for 20 releases: %v", orders)
	}
}

func others(ids []string, self string) []string {
	var out []string
	for _, id := range ids {
		if id != self {
			out = append(out, id)
		}
	}
	return out
}
