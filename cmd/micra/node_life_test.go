package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
)

// nodeProcess is a real `micra node` child process.
type nodeProcess struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	lines  chan string // stdout, line by line
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startNode(t *testing.T, args ...string) *nodeProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"node"}, args...)...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &nodeProcess{cmd: cmd, stderr: &syncBuffer{}, lines: make(chan string, 64)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return p
}

// ready reads stdout up to the ready line; it returns the listen lines'
// addresses and the ready line's peer id and addresses.
func (p *nodeProcess) ready(t *testing.T) (listening []string, id string, addrs []string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("micra node ended its output before a ready line:\n%s", p.stderr)
			}
			if a, ok := strings.CutPrefix(line, "listening "); ok {
				listening = append(listening, a)
				continue
			}
			if rest, ok := strings.CutPrefix(line, "ready "); ok {
				for _, f := range strings.Fields(rest) {
					if v, ok := strings.CutPrefix(f, "peer="); ok {
						id = v
					}
					if v, ok := strings.CutPrefix(f, "addrs="); ok {
						addrs = strings.Split(v, ",")
					}
				}
				return listening, id, addrs
			}
		case <-timeout:
			t.Fatalf("no ready line after 60 s:\n%s", p.stderr)
		}
	}
}

// signal sends sig and returns the exit status.
func (p *nodeProcess) signal(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("micra node: %v\n%s", err, p.stderr)
		}
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		<-done
		t.Fatalf("micra node did not stop on %v\n%s", sig, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// A real `micra node` process, bootstrapped to an overlay peer of the
// test's: it prints its listen addresses, then a ready line once it has
// joined (with the same peer id and addresses); on SIGTERM it announces its
// leave — the test's peer, whose failure timeout is an hour, declares it
// dead with reason "left" — says it was interrupted, not that the crawl
// finished, and exits 143. Started again on the same data directory it is
// the same peer, a member again at once, and SIGINT exits 130.
func TestNodeProcessReadyLeaveAndSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	tree, err := hierarchy.Default()
	if err != nil {
		t.Skip("no embedded hierarchy:", err)
	}
	cfg := overlay.TestnetConfig()
	cfg.FailureTimeout = time.Hour // only a leave can make the node dead
	member, err := overlay.Open(context.Background(), tree, cfg, overlay.Services{})
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	events := make(chan overlay.MemberEvent, 16)
	member.Members().OnChange(func(ev overlay.MemberEvent) {
		select {
		case events <- ev:
		default:
		}
	})
	next := func(id peer.ID, what string, p *nodeProcess) overlay.MemberEvent {
		t.Helper()
		for {
			select {
			case ev := <-events:
				if ev.Peer == id {
					return ev
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("no membership event about the node: waited for %s\n%s", what, p.stderr)
			}
		}
	}

	data := t.TempDir()
	args := []string{"--testnet", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0", "--crawler-addr", "1.1.1.1",
		"--concurrency", "1", "--bootstrap", member.Host().Addrs()[0].String() + "/p2p/" + member.ID().String()}
	var first peer.ID
	for run, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		p := startNode(t, args...)
		listening, id, addrs := p.ready(t)
		pid, err := peer.Decode(id)
		if err != nil || len(listening) == 0 || strings.Join(addrs, " ") != strings.Join(listening, " ") {
			t.Fatalf("run %d: ready peer=%q addrs=%v after listening %v (%v)", run, id, addrs, listening, err)
		}
		if run == 0 {
			first = pid
		} else if pid != first {
			t.Fatalf("restarted on the same data directory as %s, want %s", pid, first)
		}
		if ev := next(pid, "the node's join", p); ev.Dead {
			t.Fatalf("run %d: first event about the node %+v, want a join", run, ev)
		}
		code := p.signal(t, sig)
		if want := 128 + int(sig); code != want {
			t.Fatalf("run %d: exit status %d after %v, want %d\n%s", run, code, sig, want, p.stderr)
		}
		log := p.stderr.String()
		if !strings.Contains(log, "interrupted ("+map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[sig]+")") ||
			strings.Contains(log, "crawl finished") || !strings.Contains(log, "crawl stopped") {
			t.Errorf("run %d: the log does not say the node was interrupted (or says the crawl finished):\n%s", run, log)
		}
		if ev := next(pid, "the node's leave", p); !ev.Dead || ev.Reason != overlay.ReasonLeft {
			t.Fatalf("run %d: event after %v %+v, want dead with reason %q\n%s", run, sig, ev, overlay.ReasonLeft, log)
		}
	}
}
