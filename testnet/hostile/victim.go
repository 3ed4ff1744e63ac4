package hostile

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/testnet/cluster"
)

// VictimOptions says how to start the victim.
type VictimOptions struct {
	Dir    string // its home (created)
	Binary string // the micra binary
	// Open runs it in an open network; otherwise a network key made for
	// the run admits it (DIR/network.key), as a testnet's nodes are.
	Open bool
	Args []string // extra flags for `micra node`
	Env  []string // extra environment variables
}

// Victim is a running `micra node` process under attack.
type Victim struct {
	PID     int
	Info    peer.AddrInfo
	Network string // the network key's id; empty: an open network
	Snap    hierarchy.SnapshotID
	API     *node.ControlClient
	Log     string // its stderr (the node's log)

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartVictim starts a loopback testnet node in o.Dir and returns once it
// is ready and serves its control API (with pprof).
func StartVictim(ctx context.Context, o VictimOptions) (*Victim, error) {
	if o.Dir == "" || o.Binary == "" {
		return nil, errors.New("hostile: the victim needs a directory and a micra binary")
	}
	data := filepath.Join(o.Dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	// heartbeats: the attack floods the heartbeat topic (the hostile peer
	// speaks no SWIM yet)
	f := node.File{DataDir: "data", Testnet: true, Pprof: true, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Membership: "heartbeat"}
	var netID string
	if !o.Open {
		id, err := admit(o.Dir, data)
		if err != nil {
			return nil, err
		}
		f.Network, netID = id, id
	}
	var b strings.Builder
	b.WriteString("# the victim of micra bench flood\n")
	if err := node.WriteTOML(&b, f); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "config.toml"), []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(o.Dir, "node.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Binary, append([]string{"node", "--home", o.Dir}, o.Args...)...)
	cmd.Env = append(node.WithoutSettingsEnv(os.Environ()), o.Env...)
	cmd.Stderr = lf
	// SIGTERM to the victim should the bench die first: no node outlives it
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, err := cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("hostile: start the victim: %w", err)
	}
	v := &Victim{PID: cmd.Process.Pid, Network: netID, Log: logPath, cmd: cmd, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				select {
				case ready <- rest:
				default:
				}
			}
		}
		io.Copy(io.Discard, out)
		v.err = cmd.Wait()
		lf.Close()
		close(v.done)
	}()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	select {
	case line := <-ready:
		if err := v.readReady(wctx, line, data); err != nil {
			v.Stop()
			return nil, err
		}
		return v, nil
	case <-v.done:
		return nil, fmt.Errorf("hostile: the victim exited before it was ready (%v); its log: %s", v.err, logPath)
	case <-wctx.Done():
		v.Stop()
		return nil, fmt.Errorf("hostile: the victim was not ready: %w; its log: %s", wctx.Err(), logPath)
	}
}

// readReady takes the victim's address from its ready line and its
// snapshot from its control API.
func (v *Victim) readReady(ctx context.Context, line, data string) error {
	for _, f := range strings.Fields(line) {
		if a, ok := strings.CutPrefix(f, "addrs="); ok {
			ai, err := peer.AddrInfoFromString(strings.Split(a, ",")[0])
			if err != nil {
				return fmt.Errorf("hostile: the victim's ready line %q: %w", line, err)
			}
			v.Info = *ai
		}
	}
	if v.Info.ID == "" {
		return fmt.Errorf("hostile: the victim's ready line %q names no address", line)
	}
	for {
		u, err := node.ReadAPIFile(data)
		if err == nil {
			if v.API, err = node.NewControlClient(u); err != nil {
				return err
			}
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hostile: the victim's control API: %w", err)
		case <-v.done:
			return fmt.Errorf("hostile: the victim exited (%v); its log: %s", v.err, v.Log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	id, err := v.API.ID(ctx)
	if err != nil {
		return err
	}
	if v.Snap, err = parseSnapshot(id.Hierarchy); err != nil {
		return fmt.Errorf("hostile: the victim's hierarchy %q: %w", id.Hierarchy, err)
	}
	return nil
}

// Alive reports whether the victim's process is still running.
func (v *Victim) Alive() bool {
	select {
	case <-v.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits up to 30 s (then kills). It returns the
// process's exit error unless the signal ended it.
func (v *Victim) Stop() error {
	if !v.Alive() {
		return v.exitErr()
	}
	_ = v.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-v.done:
	case <-time.After(30 * time.Second):
		_ = v.cmd.Process.Kill()
		<-v.done
		return fmt.Errorf("hostile: the victim did not stop within 30 s of SIGTERM: killed (its log: %s)", v.Log)
	}
	return v.exitErr()
}

func (v *Victim) exitErr() error {
	var ee *exec.ExitError
	if errors.As(v.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && (ws.Signaled() && ws.Signal() == syscall.SIGTERM || ws.ExitStatus() == 128+int(syscall.SIGTERM)) {
			return nil
		}
		return fmt.Errorf("hostile: the victim: %w (its log: %s)", v.err, v.Log)
	}
	return v.err
}

// admit makes a network key for the run (dir/network.key) and the
// victim's certificate (data/membership.cert, for its identity key,
// created now), as a testnet does, and returns the network's id.
func admit(dir, data string) (string, error) {
	k, err := cluster.NewNetworkKey(dir)
	if err != nil {
		return "", fmt.Errorf("hostile: %w", err)
	}
	return k.ID().String(), k.Admit(data, false)
}

func parseSnapshot(s string) (hierarchy.SnapshotID, error) {
	var id hierarchy.SnapshotID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("want %d hex digits", 2*len(id))
	}
	copy(id[:], b)
	return id, nil
}
